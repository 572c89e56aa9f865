"""Shared set-up for the launch tests, whose jobs start processes without mpiexec.

Some jobs mostly wait: for a rendezvous timeout to pass, to prove that a missing or mistaken
rank ends the others with an error naming it. A module names the fixtures that start such jobs
in BACKGROUND_JOBS; each returns a future of its results, and is set up with the module's first
test, so that the jobs wait while the module's other tests run instead of before the tests
that read them (which the module puts last)."""
import pytest

from mpigrad.launchers import mpi_launcher


@pytest.fixture(scope="module", autouse=True)
def _background_jobs_start_with_the_module(request):
    # Only those that a selected test needs; never under an MPI launcher, since tests that
    # start their own processes run in the serial step only.
    if mpi_launcher() is not None:
        return
    for name in getattr(request.module, "BACKGROUND_JOBS", ()):
        if any(item.module is request.module and name in item.fixturenames
               for item in request.session.items):
            request.getfixturevalue(name)
