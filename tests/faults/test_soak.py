"""The soak (soak.py) in its short form, for CI: a 2-rank and a 3-rank job per kind of event
(kill -9, a lasting SIGSTOP, a SIGSTOP resumed before the timeout, nothing), split between
the sizes, each with the invariants checked after its event. About a minute in all; run
`python tests/faults/soak.py --minutes N` for the long form.

Serial step only: it launches its own mpiexec jobs (each under `timeout`)."""
import shutil

import pytest

from tests.faults.soak import soak

pytestmark = [pytest.mark.skipif(shutil.which("mpiexec") is None,
                                 reason="no mpiexec on PATH (pip install mpich)"),
              pytest.mark.mpi_skip]


@pytest.mark.parametrize("ranks, events", [(2, ("kill", "stop-resume")),
                                           (3, ("stop", "none"))])
def test_faults_at_random_points_keep_every_invariant(ranks, events):
    summaries = soak(ranks, seconds=0, seed=ranks, events=events, log=print)
    assert len(summaries) == len(events)
