"""Shared set-up for the DistributedDataParallel tests.

Run under MPI: `mpiexec -n 2|3 python -m pytest --with-mpi tests/parallel` (tests marked
`mpi(min_size=2)`); serially, only the tests that launch their own small MPI jobs in a
subprocess (under a timeout) run. Every test is also bounded in-process: a watchdog dumps the
stacks and exits the rank if a test runs longer than WATCHDOG_SECONDS, so a regression that
hangs fails the run instead of blocking it.
"""
import faulthandler

import pytest

WATCHDOG_SECONDS = 240


@pytest.fixture(scope="session", autouse=True)
def _every_test_has_the_process_group(process_group):
    """DDP needs the default group; tests/conftest.py starts it."""


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()

