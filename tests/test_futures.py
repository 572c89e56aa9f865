"""mpigrad.futures.Future: completion from any thread, chaining, errors, waiting for many."""
import threading

import pytest

from mpigrad.futures import Future, collect_all, wait_all


def complete_later(fut, value, delay=0.05):
    threading.Timer(delay, fut.set_result, args=(value,)).start()


def test_wait_returns_value_set_by_another_thread():
    fut = Future()
    complete_later(fut, 7)
    assert fut.wait() == 7
    assert fut.done() and fut.value() == 7


def test_then_chains_and_propagates_errors():
    fut = Future()
    doubled = fut.then(lambda f: f.value() * 2)
    complete_later(fut, 21)
    assert doubled.wait() == 42

    failing = Future()
    child = failing.then(lambda f: f.value() + 1)
    failing.set_exception(KeyError("lost"))
    with pytest.raises(KeyError, match="lost"):
        child.wait()
    assert isinstance(child.exception(), KeyError)


def test_callback_error_lands_in_child():
    fut = Future.completed(1)
    child = fut.then(lambda f: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        child.wait()


def test_add_done_callback_runs_once_even_when_already_done():
    seen = []
    fut = Future()
    fut.add_done_callback(lambda f: seen.append(f.value()))
    fut.set_result("a")
    fut.add_done_callback(lambda f: seen.append(f.value() + "!"))
    assert seen == ["a", "a!"]


def test_complete_twice_and_value_before_done_are_errors():
    fut = Future()
    with pytest.raises(RuntimeError, match="before the Future completed"):
        fut.value()
    fut.set_result(1)
    with pytest.raises(RuntimeError, match="already completed"):
        fut.set_result(2)
    with pytest.raises(TypeError):
        Future().set_exception("not an exception")


def test_wait_timeout_leaves_future_pending():
    fut = Future()
    with pytest.raises(TimeoutError):
        fut.wait(timeout=0.01)
    assert not fut.done()


def test_wait_all_and_collect_all():
    futs = [Future() for _ in range(5)]
    for i, fut in enumerate(futs):
        complete_later(fut, i * i, delay=0.01 * (5 - i))
    assert wait_all(futs) == [0, 1, 4, 9, 16]
    assert collect_all([]).wait() == []
    bad = [Future.completed(1), Future()]
    bad[1].set_exception(ValueError("second"))
    gathered = collect_all(bad).wait()
    assert gathered[0].value() == 1
    with pytest.raises(ValueError, match="second"):
        wait_all(bad)


class Polled(Future):
    """A Future that completes only when driven, like one backed by MPI requests."""

    def __init__(self, polls_needed):
        super().__init__()
        self.polls_left = polls_needed

    def _progress(self, block):
        while self.polls_left > 0:
            self.polls_left -= 1
            if not block:
                return
        if not self._completed:
            self.set_result("driven")


def test_chained_future_drives_its_parent():
    parent = Polled(polls_needed=3)
    child = parent.then(lambda f: f.value().upper())
    assert not child.done()  # one poll of the parent
    assert child.wait() == "DRIVEN"
    assert parent.polls_left == 0
