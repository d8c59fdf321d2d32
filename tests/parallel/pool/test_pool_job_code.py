"""A pool pickles a job's function once per function, not once per job, when
pickle writes it by reference; everything pickled by value still goes with
every job (issue 37: ``Pool.apply``'s per-call cost)."""

from __future__ import annotations

import functools
import sys

import _job_code_helpers as helpers
import pytest

from easycore.common.parallel import Pool
from easycore.common.parallel.pool.program import by_reference

START_METHODS = ["fork", "spawn"] if sys.platform.startswith("linux") else ["spawn"]


def test_only_top_level_functions_of_modules_count_as_by_reference():
    assert by_reference(helpers.named) and by_reference(abs)
    assert not by_reference(lambda x: x)
    assert not by_reference(functools.partial(helpers.add_all, [1]))
    assert not by_reference([].append)  # a bound method carries its object

    def local(x):
        return x

    assert not by_reference(local)


@pytest.mark.parametrize("start_method", START_METHODS)
def test_state_pickled_by_value_is_read_anew_for_every_call(start_method, no_leaks):
    values = [1]
    call = functools.partial(helpers.add_all, values)
    with Pool(1, start_method=start_method) as pool:
        assert pool.apply(call, (10,)) == 11
        values.append(5)  # the partial is pickled again: the worker sees the change
        assert pool.apply(call, (10,)) == 16
        k = 2
        assert pool.apply(lambda x: x * k, (3,)) == 6
        k = 3
        assert pool.apply(lambda x: x * k, (3,)) == 9


@pytest.mark.parametrize("start_method", START_METHODS)
def test_a_function_by_reference_is_what_its_name_holds_in_the_worker_now(start_method,
                                                                           no_leaks):
    # As with the stdlib's pool, a function by reference is looked up by name
    # when a job arrives: rebinding that name in the worker is seen by the next
    # job, even though the same bytes were read before.
    with Pool(1, start_method=start_method) as pool:
        assert pool.apply(helpers.named, ("a",)) == "named a"
        assert pool.map(helpers.named, ["b"]) == ["named b"]
        assert pool.apply(helpers.rebind, (None,)) is True
        assert pool.apply(helpers.named, ("c",)) == "other c"
    assert helpers.named("d") == "named d"  # the caller's module is untouched
