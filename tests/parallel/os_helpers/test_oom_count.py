"""The out-of-memory killer's count, read from ``/proc/vmstat`` (or a file in its place)."""

from __future__ import annotations

import pytest

from easycore.common.parallel._os import oom


@pytest.mark.parametrize("text, count", [
    ("nr_free_pages 1\noom_kill 5\nnr_foo 2\n", 5),  # among other lines
    ("oom_kill 7\nnr_free_pages 1\n", 7),  # the first line
    ("nr_free_pages 1\noom_kill 12", 12),  # the last line, with no newline
    ("nr_free_pages 1\noom_kill_other 3\n", None),  # another counter's name only
    ("nr_free_pages 1\n", None),  # an old kernel: no such line
    ("oom_kill many\n", None),  # not a number
])
def test_kills_reads_the_oom_kill_line_and_nothing_else(text, count, tmp_path, monkeypatch):
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(text)
    monkeypatch.setattr(oom, "_VMSTAT", str(vmstat))
    assert oom.kills() == count
    assert oom.since(None) is None
    if count is not None:
        vmstat.write_text(text.replace(f"oom_kill {count}", f"oom_kill {count + 2}"))
        assert oom.since(count) == 2


def test_kills_is_none_where_the_file_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(oom, "_VMSTAT", str(tmp_path / "absent"))
    assert oom.kills() is None
