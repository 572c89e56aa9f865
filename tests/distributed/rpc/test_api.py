"""rpc_sync / rpc_async / Futures / worker naming, on 2 and 3 workers."""
import threading

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed.autograd as dist_autograd
import mpigrad.distributed.rpc as rpc
from mpigrad.autograd.profiler import profile
from mpigrad.futures import Future, collect_all, wait_all

from . import _remote

pytestmark = pytest.mark.mpi(min_size=2)


def test_rpc_sync_runs_on_the_destination_named_any_way(workers):
    rank, size = workers
    peer = (rank + 1) % size
    info = rpc.get_worker_info(f"worker{peer}")
    assert info.id == peer and info.name == f"worker{peer}"
    assert rpc.get_worker_info() == rpc.WorkerInfo(f"worker{rank}", rank)
    for to in (f"worker{peer}", peer, info):
        assert rpc.rpc_sync(to, _remote.whoami) == f"worker{peer}"


def test_args_and_kwargs(workers):
    rank, size = workers
    if rank == 0:
        assert rpc.rpc_sync(1, _remote.add, args=(2, 3), kwargs={"scale": 10}) == 50
        assert rpc.rpc_sync(1, _remote.add, args=(2,)) == 2
        assert rpc.rpc_sync("worker1", _remote.identity, args=({"a": [1, (2, "x")]},)) == \
            {"a": [1, (2, "x")]}


def test_mpigrad_ops_travel_by_name(workers):
    rank, _ = workers
    if rank == 0:
        out = rpc.rpc_sync(1, mg.add, args=(mg.ones(3), 2))
        np.testing.assert_array_equal(out._array, np.full(3, 3.0))


def test_rpc_async_future_api(workers):
    rank, size = workers
    if rank != 0:
        return
    fut = rpc.rpc_async(1, _remote.add, args=(1, 2))
    assert isinstance(fut, Future)
    assert fut.wait() == 3 and fut.value() == 3 and fut.done()
    chained = rpc.rpc_async(1, _remote.add, args=(4, 5)).then(lambda f: f.value() * 2)
    assert chained.wait() == 18
    seen = []
    done = threading.Event()
    fut = rpc.rpc_async(1, _remote.sleep_then, args=(0.05, "late"))

    def callback(f):
        seen.append(f.value())
        done.set()

    fut.add_done_callback(callback)
    assert fut.wait() == "late"
    assert done.wait(10) and seen == ["late"]
    futures = [rpc.rpc_async(r % size, _remote.add, args=(r, 1)) for r in range(12)]
    assert wait_all(futures) == [r + 1 for r in range(12)]
    assert [f.value() for f in collect_all(futures).wait()] == [r + 1 for r in range(12)]


def test_callback_may_make_a_blocking_rpc(workers):
    rank, _ = workers
    if rank == 0:
        fut = rpc.rpc_async(1, _remote.sleep_then, args=(0.05, 1))
        nested = fut.then(lambda f: rpc.rpc_sync(1, _remote.add, args=(f.value(), 10)))
        assert nested.wait() == 11


def test_call_to_self(workers):
    rank, _ = workers
    assert rpc.rpc_sync(rank, _remote.add, args=(rank, 1)) == rank + 1


def test_nested_call_back_to_the_caller(workers):
    """A calls B, which calls A while A's caller thread is blocked waiting for B."""
    rank, size = workers
    if rank == 0:
        assert rpc.rpc_sync(1, _remote.call_back, args=(0, _remote.whoami, ())) == "worker0"


def test_a_long_function_does_not_block_other_requests(workers):
    """worker1 runs a function that waits until a later request sets an event: that only
    finishes if requests run concurrently on worker1's pool."""
    rank, _ = workers
    if rank == 0:
        waiting = rpc.rpc_async(1, _remote.wait_for_event, args=("long-test", 30))
        assert rpc.rpc_sync(1, _remote.set_event_later, args=("long-test",))
        assert waiting.wait() is True


def test_requests_run_at_once_while_the_listener_runs_one(workers):
    """The listener runs a request itself; meanwhile other requests still arrive, run
    concurrently, and the calls of the request it runs still time out."""
    rank, _ = workers
    if rank == 0:
        waiting = [rpc.rpc_async(1, _remote.wait_for_event, args=("many", 30)) for _ in range(3)]
        assert rpc.rpc_sync(1, _remote.times_out_calling,
                            args=(0, 0.2, "nested late")) == "timed out"
        _remote.set_event_later("nested late")  # the timed-out call's function, run here
        assert rpc.rpc_sync(1, _remote.set_event_later, args=("many",))
        assert [f.wait() for f in waiting] == [True] * 3


def test_every_rank_calls_every_rank_at_once(workers):
    rank, size = workers
    futures = [rpc.rpc_async(r, _remote.add, args=(rank, 100 * r)) for r in range(size)
               for _ in range(5)]
    assert wait_all(futures) == [rank + 100 * r for r in range(size) for _ in range(5)]


def test_calls_and_the_distributed_backward_show_in_the_profiler(workers):
    rank, _ = workers
    if rank != 0:
        return
    x = mg.tensor(np.ones(3), requires_grad=True)
    with profile() as prof:
        rpc.rpc_sync(1, _remote.add, args=(1, 2))
        rpc.rpc_async("worker1", _remote.add, args=(1, 2)).wait()
        rpc.remote(1, _remote.add, args=(1, 2)).to_here()
        with dist_autograd.context() as context_id:
            loss = rpc.rpc_sync(1, _remote.squared_sum, args=(x,))
            dist_autograd.backward(context_id, [loss])
    names = {e.name for e in prof.function_events}
    for kind in ("rpc_sync", "rpc_async", "remote"):
        assert f"{kind}#{_remote.__name__}.add(worker0 -> worker1)" in names, names
    assert any(n.startswith("dist_autograd.backward(context ") for n in names), names
    assert "rpc_sync" in prof.key_averages().table()
