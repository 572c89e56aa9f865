"""Shared set-up for the communication-layer tests.

Every test runs serially (`pytest`, a world of one process) and under MPI (`mpiexec -n 2|3
python -m pytest --only-mpi tests/distributed`; tests/conftest.py marks them), except those
marked `mpi(min_size=k)`, which need k ranks. Every rank runs the same tests in the same
order, so a test must never skip on some ranks only. Inputs are generated from a seed per
rank, so each rank can also build every other rank's input and compute the expected result in
numpy (see _helpers).
"""
import gc

import pytest

import mpigrad as mg


@pytest.fixture(scope="session", autouse=True)
def _every_test_has_the_process_group(process_group):
    """Tests here call the collectives directly; tests/conftest.py starts the group."""


@pytest.fixture(scope="module", autouse=True)
def _collections_walk_only_this_modules_objects():
    """Freeze what exists when a module starts (imported libraries, collected items), so a
    full collection walks only the objects made since. rpc.shutdown collects garbage, and
    the RPC and DDP lifetime tests collect it themselves, in every test: with torch and
    numba loaded a collection walks some 250,000 objects, and on 3 ranks over 2 cores that
    made the RPC tests take 2-3 times as long. Unfrozen at the module's end: gc.get_objects()
    leaves frozen objects out, and code that later tests run looks through it (jobs/bench's
    harness)."""
    gc.collect()  # the garbage of earlier modules goes now, not frozen with the rest
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(params=["ndarray", "Tensor"])
def wrap(request):
    """Pass arrays to the collectives as they are, or as Tensors sharing their memory (so the
    test can read the result from the array either way)."""
    if request.param == "ndarray":
        return lambda a: a
    return mg.from_numpy
