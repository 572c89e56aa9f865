"""Shared set-up for the FSDP tests: every test runs serially (a world of one) and on 2 and 3
ranks (`mpiexec -n 2|3 python -m pytest --only-mpi tests/distributed/fsdp`); a hang dumps
the stacks and exits the rank instead of blocking the run."""
import faulthandler
import gc

import pytest

WATCHDOG_SECONDS = 240


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def collected_between_tests():
    """Sharded models hold communicators, freed when collected: at the same point on every
    rank (a test's end), never inside another test's collective."""
    yield
    gc.collect()
