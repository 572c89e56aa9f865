"""Shared set-up for the DistributedDataParallel tests (distributed/ddp/ and
distributed/algorithms/).

Run under MPI: `mpiexec -n 2|3 python -m pytest --only-mpi tests/distributed/ddp`
(tests/conftest.py marks every test here `mpi`; most need `mpi(min_size=2)` and skip in a
world of one); serially, the others run, with the tests marked `mpi_skip` that launch their
own small MPI jobs in a subprocess (under a timeout). Every test is also bounded in-process: a
watchdog dumps the stacks and exits the rank if a test runs longer than WATCHDOG_SECONDS, so a
regression that hangs fails the run instead of blocking it.
"""
import faulthandler

import pytest

from mpigrad.distributed.algorithms.ddp_comm_hooks.shared_memory import ENV as SHARED_MEMORY_ENV

WATCHDOG_SECONDS = 240


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(params=["shared-memory", "mpi"])
def reduction(request, monkeypatch):
    """DDP's default reduction on one host: in the buckets the ranks share, or (with
    MPIGRAD_DDP_SHARED_MEMORY=0) MPI's allreduce, with large gradients reduced in place."""
    if request.param == "mpi":
        monkeypatch.setenv(SHARED_MEMORY_ENV, "0")
    return request.param
