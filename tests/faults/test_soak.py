"""The soak (soak.py) in its short form, for CI: a 2-rank and a 3-rank job per kind of event
(kill -9, a lasting SIGSTOP, a SIGSTOP resumed before the timeout, nothing), split between
the sizes, each with the invariants checked after its event. The 2-rank and the 3-rank jobs
run side by side (most of a faulty job's time is its ranks waiting out the group's timeout);
run `python tests/faults/soak.py --minutes N` for the long form.

Serial step only: it launches its own mpiexec jobs (each under `timeout`)."""
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.faults.soak import soak

pytestmark = [pytest.mark.skipif(shutil.which("mpiexec") is None,
                                 reason="no mpiexec on PATH (pip install mpich)"),
              pytest.mark.mpi_skip]

EVENTS_BY_SIZE = {2: ("kill", "stop-resume"), 3: ("stop", "none")}


@pytest.fixture(scope="module")
def soaks():
    """Both sizes' soaks, started together on first use: {ranks: future of the summaries}."""
    with ThreadPoolExecutor(max_workers=len(EVENTS_BY_SIZE)) as pool:
        yield {ranks: pool.submit(soak, ranks, seconds=0, seed=ranks, events=events,
                                  log=print)
               for ranks, events in EVENTS_BY_SIZE.items()}


@pytest.mark.parametrize("ranks, events", EVENTS_BY_SIZE.items())
def test_faults_at_random_points_keep_every_invariant(ranks, events, soaks):
    summaries = soaks[ranks].result()
    assert len(summaries) == len(events)
