"""warm_kernels.py: the runs happen once per cache and sources, and a failing one is an
error naming it (the real runs are checked by the fixture that makes them, before every job
test)."""
import os

import pytest

from tests.jobs import warm_kernels


@pytest.fixture
def fake_jobs(tmp_path, monkeypatch):
    """A jobs folder whose one script appends a line to a file per run, and an empty cache."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "job.py").write_text("import sys\nopen(sys.argv[1], 'a').write('ran\\n')\n"
                                 "sys.exit(int(sys.argv[2]))\n")
    monkeypatch.setattr(warm_kernels, "JOBS", jobs)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    return jobs, tmp_path / "runs.txt"


def test_the_runs_happen_once_per_cache_and_again_when_a_job_changes(fake_jobs, monkeypatch):
    jobs, runs = fake_jobs
    monkeypatch.setattr(warm_kernels, "RUNS", (["job.py", str(runs), "0"],) * 2)
    assert warm_kernels.ensure_warm(dict(os.environ))
    assert runs.read_text() == "ran\n" * 2
    assert not warm_kernels.ensure_warm(dict(os.environ))  # warm: nothing runs
    assert runs.read_text() == "ran\n" * 2

    (jobs / "job.py").write_text((jobs / "job.py").read_text() + "# changed\n")
    assert warm_kernels.ensure_warm(dict(os.environ))
    assert runs.read_text() == "ran\n" * 4


def test_a_failing_run_is_an_error_naming_it_and_leaves_the_cache_cold(fake_jobs, monkeypatch):
    jobs, runs = fake_jobs
    monkeypatch.setattr(warm_kernels, "RUNS", (["job.py", str(runs), "3"],))
    with pytest.raises(RuntimeError, match=rf"job\.py {runs} 3 exited 3"):
        warm_kernels.ensure_warm(dict(os.environ))
    monkeypatch.setattr(warm_kernels, "RUNS", (["job.py", str(runs), "0"],))
    assert warm_kernels.ensure_warm(dict(os.environ))

