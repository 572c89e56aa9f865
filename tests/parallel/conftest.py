"""Shared set-up for the DistributedDataParallel tests.

Run under MPI: `mpiexec -n 2|3 python -m pytest --with-mpi tests/parallel` (tests marked
`mpi(min_size=2)`); serially, only the tests that launch their own small MPI jobs in a
subprocess (under a timeout) run. Every test is also bounded in-process: a watchdog dumps the
stacks and exits the rank if a test runs longer than WATCHDOG_SECONDS, so a regression that
hangs fails the run instead of blocking it.
"""
import faulthandler

import pytest

import mpigrad.distributed as dist

WATCHDOG_SECONDS = 240


@pytest.fixture(scope="session", autouse=True)
def process_group():
    mine = not dist.is_initialized()
    if mine:
        dist.init_process_group()
    yield dist.group.WORLD
    if mine and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def rank():
    return dist.get_rank()


@pytest.fixture
def size():
    return dist.get_world_size()
