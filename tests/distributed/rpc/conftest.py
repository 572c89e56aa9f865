"""RPC tests: every rank starts an agent for each test and shuts it down gracefully after,
so a test's driver (usually rank 0) may call any worker while the others only serve.
Each error test runs under `bounded`, which fails the test instead of hanging the job."""
import signal

import pytest

import mpigrad.distributed as dist
import mpigrad.distributed.rpc as rpc

from . import _remote


@pytest.fixture
def workers(process_group):
    """Start RPC on every rank as worker{rank}; yields (rank, world size)."""
    rpc.init_rpc(f"worker{dist.get_rank()}")
    yield dist.get_rank(), dist.get_world_size()
    rpc.shutdown()


@pytest.fixture
def model(workers):
    """`workers`, with the split model's parameters made on every worker (_remote)."""
    rank, size = workers
    _remote.make_params(size)
    dist.barrier()  # no worker is called before it has its parameters
    return rank, size


class bounded:
    """`with bounded(10):` raises TimeoutError after 10 s (alarm on the main thread), so an
    error that should come "within seconds" fails the test rather than hanging it."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        def expired(*_):
            raise TimeoutError(f"did not finish within {self.seconds} s")
        self._previous = signal.signal(signal.SIGALRM, expired)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self._previous)
        return False
