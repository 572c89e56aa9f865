"""rpc.functions.async_execution: functions that answer with a Future's result, without a
callee thread waiting meanwhile (a batching parameter server, nested and chained calls, a
callee with a single worker thread)."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.rpc as rpc

from . import _remote
from .conftest import bounded

pytestmark = pytest.mark.mpi(min_size=2)
STEPS = 3


def _synchronous_weights(trainers):
    """The same training in one process: each step averages every trainer's gradient."""
    weights, lr = mg.zeros(3, dtype=mg.float64), 0.1
    for step in range(STEPS):
        grads = [_remote.trainer_gradient(weights, r, step) for r in range(1, trainers + 1)]
        weights = weights - lr * sum(grads) / trainers
    return weights.numpy()


def test_a_batching_parameter_server_trains_as_the_synchronous_version(workers):
    rank, size = workers
    trainers = size - 1
    with bounded(60):
        if rank != 0:
            server = rpc.rpc_sync(0, _remote.shared_server, args=(trainers,))
            weights = server.rpc_sync().get_weights()
            for step in range(STEPS):
                grad = _remote.trainer_gradient(weights, rank, step)
                weights = rpc.rpc_sync(0, _remote.BatchingServer.update_and_fetch,
                                       args=(server, grad))
            np.testing.assert_allclose(weights.numpy(), _synchronous_weights(trainers),
                                       rtol=0, atol=1e-12)
            del server
        dist.barrier()
    _remote.state.pop("server", None)


def test_nested_chained_async_calls_and_remote(workers):
    rank, size = workers
    if rank != 0:
        return
    with bounded(30):
        assert rpc.rpc_sync(1, _remote.async_add_later, args=(2, 3)) == 5
        assert rpc.rpc_async(1, _remote.async_chain, args=(size - 1, 2, 3)).wait() == 6
        assert rpc.remote(1, _remote.async_add_later, args=(4, 5)).to_here() == 9
        assert rpc.remote(0, _remote.async_add_later, args=(1, 1)).to_here() == 2
        with pytest.raises(TypeError, match="must return a Future, but it returned a int"):
            rpc.rpc_sync(1, _remote.async_returns_a_number)
        future = _remote.async_add_later(1, 2)  # called locally: the Future itself
        assert isinstance(future, rpc.Future) and future.wait() == 3


def test_a_callee_with_one_thread_serves_nested_async_calls(process_group):
    """Every worker has a single pool thread. Worker 0's async function calls worker 1's,
    which calls back to worker 0's: with each thread waiting, this would deadlock."""
    rpc.init_rpc(f"worker{dist.get_rank()}",
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(num_worker_threads=1))
    try:
        if dist.get_rank() == 0:
            with bounded(30):
                assert rpc.rpc_sync(1, _remote.async_chain, args=(0, 10, 20)) == 31
                answers = [rpc.rpc_async(1, _remote.async_chain, args=(0, i, i))
                           for i in range(5)]
                assert [a.wait() for a in answers] == [2 * i + 1 for i in range(5)]
    finally:
        rpc.shutdown()


def test_a_worker_leaving_at_once_still_sends_the_async_reply_it_just_made(process_group):
    """worker1 completes an async function's Future and at once shuts down without the
    agreement: the reply (slow to encode: a long list goes by pickle) is due from that
    moment, so it leaves before worker1's "bye", and worker0 gets it rather than
    WorkerUnavailableError."""
    rank = dist.get_rank()
    rpc.init_rpc(f"worker{rank}")
    answer, got = list(range(300_000)), None
    if rank == 0:
        with bounded(30):
            try:
                got = rpc.rpc_sync(1, _remote.async_answer_when_told)
            except rpc.WorkerUnavailableError as exc:
                got = exc
    elif rank == 1:
        with bounded(30):
            assert _remote.wait_for_event("asked", 20)
            _remote.state.pop("asked")
            _remote.state.pop("answer").set_result(answer)
            rpc.shutdown(graceful=False)
    dist.barrier()  # worker0 has its answer before anyone else shuts down
    if rank != 1:
        rpc.shutdown(graceful=False)
    dist.barrier()
    if rank == 0:
        assert got == answer, got
