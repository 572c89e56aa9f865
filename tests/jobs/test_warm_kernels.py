"""warm_kernels.py: each run happens once per cache and sources, a run another worker is
making is left to it and waited for, and a failing run is an error naming it (the real runs
are checked by the fixture that makes them, before every job test)."""
import fcntl
import os
import threading
import time

import pytest

from tests.jobs import warm_kernels


@pytest.fixture
def fake_jobs(tmp_path, monkeypatch):
    """A jobs folder whose one script appends its name argument to a file and exits with its
    code argument, and an empty cache."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "job.py").write_text("import sys\nopen(sys.argv[1], 'a').write(sys.argv[2] + "
                                 "'\\n')\nsys.exit(int(sys.argv[3]))\n")
    monkeypatch.setattr(warm_kernels, "JOBS", jobs)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    return jobs, tmp_path / "runs.txt"


def test_each_run_happens_once_per_cache_and_again_when_a_job_changes(fake_jobs,
                                                                        monkeypatch):
    jobs, runs = fake_jobs
    monkeypatch.setattr(warm_kernels, "RUNS", (["job.py", str(runs), "a", "0"],
                                               ["job.py", str(runs), "b", "0"]))
    assert warm_kernels.ensure_warm(dict(os.environ))
    assert runs.read_text() == "a\nb\n"
    assert not warm_kernels.ensure_warm(dict(os.environ))  # warm: nothing runs
    assert runs.read_text() == "a\nb\n"

    (jobs / "job.py").write_text((jobs / "job.py").read_text() + "# changed\n")
    assert warm_kernels.ensure_warm(dict(os.environ))
    assert runs.read_text() == "a\nb\n" * 2


def test_a_run_another_worker_makes_is_left_to_it_and_waited_for(fake_jobs, monkeypatch):
    jobs, runs = fake_jobs
    theirs, ours = ["job.py", str(runs), "theirs", "0"], ["job.py", str(runs), "ours", "0"]
    monkeypatch.setattr(warm_kernels, "RUNS", (theirs, ours))
    directory = warm_kernels._cache_directory()
    directory.mkdir()
    sources = warm_kernels._sources()
    their_marker = warm_kernels._marker(directory, sources, theirs)
    # The other worker: its own open file holds the lock of the first run.
    with open(f"{their_marker}.lock", "a") as their_lock:
        fcntl.flock(their_lock, fcntl.LOCK_EX)
        done = []
        worker = threading.Thread(target=lambda: done.append(
            warm_kernels.ensure_warm(dict(os.environ))))
        worker.start()
        deadline = time.monotonic() + 60
        while not warm_kernels._marker(directory, sources, ours).exists():
            assert time.monotonic() < deadline and worker.is_alive(), done
            time.sleep(0.05)
        assert worker.is_alive() and runs.read_text() == "ours\n"  # and waits for theirs
        their_marker.touch()
    worker.join(60)
    assert done == [True] and runs.read_text() == "ours\n"  # theirs not made twice


def test_a_failing_run_is_an_error_naming_it_and_leaves_the_cache_cold(fake_jobs, monkeypatch):
    jobs, runs = fake_jobs
    monkeypatch.setattr(warm_kernels, "RUNS", (["job.py", str(runs), "a", "3"],))
    with pytest.raises(RuntimeError, match=rf"job\.py {runs} a 3 exited 3"):
        warm_kernels.ensure_warm(dict(os.environ))
    monkeypatch.setattr(warm_kernels, "RUNS", (["job.py", str(runs), "a", "0"],))
    assert warm_kernels.ensure_warm(dict(os.environ))
    assert runs.read_text() == "a\na\n"
