"""A call whose function pickles big (a bound method's object) says so, once per type.

``Pool.map(obj.method, ...)`` and ``JobQueue.put(obj.method, ...)`` send the
whole object to every worker; past ``BIG_CALL`` bytes a ``UserWarning`` names
the object's type, the size and the remedies, and insights count the bytes
each worker was sent.
"""

from __future__ import annotations

import functools
import warnings

import pytest
from _stack_funcs import Heavy

from easycore.common.parallel import JobQueue, Pool
from easycore.common.parallel.transport import big_calls

pytestmark = pytest.mark.timeout(120)

WAIT = 60
SIZE = 16 * 2**20


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(big_calls, "_warned", set())  # once per type: start afresh


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_bound_method_of_a_big_object_warns_once_naming_its_type(method, fresh_warnings,
                                                                    no_leaks):
    heavy = Heavy()
    with Pool(2, start_method=method, insights=True) as pool:
        with pytest.warns(UserWarning, match=r"pickles to 16 MB .*_stack_funcs\.Heavy") as got:
            assert pool.map(heavy.size, [0, 1], 1) == [SIZE, SIZE + 1]
        text = str(got[0].message)
        assert "SharedList" in text and "initializer" in text and "every worker" in text
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per type: no second warning
            assert pool.apply(heavy.size, (2,)) == SIZE + 2
            assert pool.map(abs, [-1]) == [1]  # small functions never warn
        # Three calls carried the object; which worker ran each is the pool's choice.
        sent = [w.bytes for w in pool.insights().workers]
        assert sum(sent) > 3 * SIZE and max(sent) > SIZE


def test_a_partial_and_a_job_queue_call_name_what_they_carry(fresh_warnings, no_leaks):
    with Pool(1) as pool, \
            pytest.warns(UserWarning, match=r"functools\.partial with builtins\.bytes"):
        pool.apply(functools.partial(len, b"y" * SIZE))
    with JobQueue(1) as jobs, pytest.warns(UserWarning, match=r"_stack_funcs\.Heavy"):
        jobs.put(Heavy().size, 0)
        assert jobs.get(timeout=WAIT) == SIZE


@pytest.mark.parametrize("call", ["map", "imap", "apply"])
def test_items_that_carry_a_big_object_warn_once_naming_its_type(call, fresh_warnings, no_leaks):
    # The arguments' side of the rule: one chunk's items past BIG_CALL.
    with Pool(1) as pool:
        run = {"map": lambda items: pool.map(len, items, 1),
               "imap": lambda items: list(pool.imap(len, items, 1)),
               "apply": lambda items: [pool.apply(len, (items[0],))]}[call]
        with pytest.warns(UserWarning, match=r"pickle to 16 MB .*builtins\.bytearray"):
            assert run([bytearray(SIZE)]) == [SIZE]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per type, and small items never warn
            assert run([bytearray(SIZE)]) == [SIZE]
            assert pool.map(abs, [-1, -2]) == [1, 2]
