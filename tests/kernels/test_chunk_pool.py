"""run_chunks (kernels/threads.py): chunks of numpy work on several threads, each BLAS call
on one; results in chunk order, errors raised in the caller, no waiting on a busy pool, and a
forked child that can use it again."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.kernels import threads


def _blas_threads():
    return [lib.get_num_threads() for lib in threads._blas_libraries()]


def test_one_thread_runs_the_chunks_in_order_on_the_caller(restore_threads):
    mg.set_num_threads(1)
    seen = []
    assert threads.run_chunks(lambda k: seen.append(threading.get_ident()) or k * k, 5) == [
        0, 1, 4, 9, 16]
    assert set(seen) == {threading.get_ident()}


def test_two_threads_run_chunks_at_once_with_single_threaded_blas(restore_threads):
    mg.set_num_threads(2)
    before = _blas_threads()
    # Chunks 0 and 1 each wait for the other: only two threads at once get past it.
    meeting = threading.Barrier(2, timeout=60)
    inside = {}

    def work(k):
        if k < 2:
            meeting.wait()
        inside[k] = (threading.get_ident(), _blas_threads())
        return np.full(3, k) @ np.ones(3)

    assert threads.run_chunks(work, 6) == [3.0 * k for k in range(6)]
    assert len({ident for ident, _ in inside.values()}) == 2
    assert all(blas == [1] * len(before) for _, blas in inside.values())
    assert _blas_threads() == before


def test_a_chunks_error_reaches_the_caller_and_the_pool_still_works(restore_threads):
    mg.set_num_threads(2)
    before = _blas_threads()

    ran = []

    def work(k):
        ran.append(k)
        if k == 3:
            raise ValueError("chunk 3 failed")
        return k

    with pytest.raises(ValueError, match="chunk 3 failed"):
        threads.run_chunks(work, 100_000)
    assert len(ran) < 100_000  # the threads stopped taking chunks after the failure
    assert _blas_threads() == before
    assert threads.run_chunks(lambda k: k, 4) == [0, 1, 2, 3]


def test_a_region_inside_a_region_runs_on_its_own_thread(restore_threads):
    mg.set_num_threads(2)

    def outer(k):
        here = threading.get_ident()
        inner = threads.run_chunks(lambda j: threading.get_ident(), 3)
        return set(inner) == {here}

    assert threads.run_chunks(outer, 4) == [True] * 4


def test_a_forked_child_runs_chunks_on_a_pool_of_its_own(restore_threads):
    mg.set_num_threads(2)
    threads.run_chunks(lambda k: k, 4)  # the parent's pool threads exist now
    child = os.fork()
    if child == 0:  # pragma: no cover  (reported through the exit status)
        ok = False
        try:
            meeting = threading.Barrier(2, timeout=30)
            ok = threads.run_chunks(lambda k: meeting.wait() if k < 2 else k, 4)[2:] == [2, 3]
        finally:
            os._exit(0 if ok else 1)
    # A child left with the parent's (absent) pool threads would wait forever: poll, then
    # end it.
    deadline = time.monotonic() + 60
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the forked child's chunks never finished")
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_small_products_run_on_one_blas_thread_and_large_ones_on_all(monkeypatch,
                                                                     restore_threads):
    """threads.matmul under set_num_threads(2): a product below _THREADED_PRODUCT_FROM sees
    BLAS at one thread (a threaded OpenBLAS call leaves its workers spinning on the cores the
    chunk pool wants), a larger one BLAS's own count, restored after; the same bits as
    np.matmul either way; linear's forward and backward products go through it."""
    mg.set_num_threads(2)
    if not _blas_threads():
        pytest.skip("no BLAS library found by threadpoolctl")
    seen = []
    real_matmul = np.matmul

    def spy(a, b, out=None):
        seen.append(_blas_threads())
        return real_matmul(a, b, out=out)

    rng = np.random.default_rng(0)
    small = rng.standard_normal((64, 320)), rng.standard_normal((320, 50))
    large = rng.standard_normal((208, 208)), rng.standard_normal((208, 208))  # 208**3 > 2**23
    x = mg.tensor(small[0].astype(np.float32), requires_grad=True)
    weight = mg.tensor(small[1].T.astype(np.float32), requires_grad=True)
    monkeypatch.setattr(threads.np, "matmul", spy)
    for a, b in (small, large):
        np.testing.assert_array_equal(threads.matmul(a, b), real_matmul(a, b))
    mg.nn.functional.linear(x, weight).sum().backward()
    monkeypatch.undo()
    one, every = [1] * len(seen[0]), [2] * len(seen[0])
    # the small product, the large one, then linear's forward and its two gradients
    assert seen == [one, every, one, one, one]
    assert _blas_threads() == every
