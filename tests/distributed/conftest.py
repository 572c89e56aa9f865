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
from mpigrad.launchers import mpi_launcher


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


@pytest.fixture(scope="module", autouse=True)
def _background_jobs_start_with_the_module(request):
    """Some jobs mostly wait: for a timeout to pass, to prove that a missing, stopped or
    mistaken rank ends the others with an error naming it. A module names the fixtures that
    start such jobs in BACKGROUND_JOBS; each returns a future of its results and is set up
    with the module's first test, so that the jobs wait while the module's other tests run
    instead of before the tests that read them (which the module puts last). Only those a
    selected test needs; never under an MPI launcher, since tests that start their own
    processes run in the serial step only."""
    if mpi_launcher() is not None:
        return
    for name in getattr(request.module, "BACKGROUND_JOBS", ()):
        if any(item.module is request.module and name in item.fixturenames
               for item in request.session.items):
            request.getfixturevalue(name)


@pytest.fixture(params=["ndarray", "Tensor"])
def wrap(request):
    """Pass arrays to the collectives as they are, or as Tensors sharing their memory (so the
    test can read the result from the array either way)."""
    if request.param == "ndarray":
        return lambda a: a
    return mg.from_numpy
