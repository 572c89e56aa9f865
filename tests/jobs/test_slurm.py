"""jobs/train.sbatch on a real (single-node, throw-away) Slurm cluster.

The cluster is munged + slurmctld + slurmd started by tests/jobs/slurm_cluster.py; Slurm
and munge are installed from Debian packages first if missing. Where that cannot happen
(not root, no apt-get, no network) the tests are skipped, and the reason is shown by
pytest -ra. Set MPIGRAD_SKIP_SLURM=1 to skip them on purpose.

Jobs are submitted from a temporary directory with MPIGRAD_DIR pointing at this checkout,
so the script's defaults for logs (runs/%x-%j.log) and checkpoints
(runs/<job name>/checkpoints) are exercised without writing into the checkout.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "jobs"))  # also a script; not a package
from slurm_cluster import SlurmCluster, ensure_installed  # noqa: E402

from mpigrad.launchers import mpi_launcher  # noqa: E402

TRAIN_PY = REPO / "jobs" / "train.py"
TRAIN_SBATCH = REPO / "jobs" / "train.sbatch"
BENCH_SBATCH = REPO / "jobs" / "bench" / "bench.sbatch"
GPT_SBATCH = REPO / "jobs" / "train_gpt.sbatch"
LM_SBATCH = REPO / "jobs" / "train_lm.sbatch"
FINISHED = re.compile(r"^\[rank 0\] training finished: epochs=(\d+) test_accuracy=([0-9.]+)$",
                      re.M)

# Small runs: a third of the default synthetic dataset (test accuracy about 0.96 after
# these epochs; the default 12000 samples only take longer), a few epochs.
EPOCHS = 3
TRAIN_SAMPLES = 4000
# Enough epochs that the job is still running when the signal arrives after epoch 1 (9
# epochs of 3000 samples after it: seconds even on a quiet machine), few samples so that
# the jobs that get preempted and their reference are short.
PREEMPT_EPOCHS = 10
PREEMPT_SAMPLES = 3000
JOB_TIMEOUT = 240

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    if os.environ.get("MPIGRAD_SKIP_SLURM"):
        pytest.skip("MPIGRAD_SKIP_SLURM is set")
    if not sys.platform.startswith("linux"):
        pytest.skip("the test cluster needs Linux")
    if mpi_launcher() is not None:
        pytest.skip("started by mpiexec: the Slurm tests run in the serial pass only")
    if os.geteuid() != 0:
        pytest.skip("the test cluster needs root (slurmd runs as root)")
    if not TRAIN_PY.exists():
        pytest.skip(f"{TRAIN_PY.relative_to(REPO)} does not exist yet")
    reason = ensure_installed(log=lambda msg: print(msg, flush=True))
    if reason:
        pytest.skip(reason)
    # A short path: the munge socket lives here and socket paths are limited to ~100 bytes.
    workdir = tempfile.mkdtemp(prefix="mpigrad-slurm-")
    # 6 CPUs: the two preempted jobs and their reference run at once (2 tasks each).
    c = SlurmCluster(workdir, cpus=6)
    try:
        try:
            c.start()
        except RuntimeError as e:
            pytest.fail(f"could not start the test cluster in {workdir}: {e}")
        yield c
    finally:
        c.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def submit_dir(tmp_path):
    (tmp_path / "runs").mkdir()  # Slurm does not create the directory of --output
    return tmp_path


def job_env(cluster, **extra):
    """What a user has at submit time: this interpreter's virtualenv, the checkout."""
    env = cluster.env(MPIGRAD_DIR=str(REPO))
    in_venv = sys.prefix != sys.base_prefix
    env["MPIGRAD_VENV"] = sys.prefix if in_venv else ""
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def sbatch(cluster, submit_dir, *args, env=None):
    """Run sbatch from `submit_dir`; args: sbatch options, the script, the script's arguments.
    Returns the job id."""
    r = subprocess.run(["sbatch", "--parsable", *args], cwd=submit_dir,
                       env=env or job_env(cluster), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=JOB_TIMEOUT)
    m = re.match(r"(\d+)", r.stdout.strip())
    assert m, f"sbatch printed no job id (exit {r.returncode}): {r.stdout} {r.stderr}"
    return int(m.group(1))


def run_job(cluster, submit_dir, *args, env=None):
    """sbatch, then wait until the job is finished for good (through requeues); returns the
    job id and its `scontrol show job` fields. Not `sbatch --wait`: that polls the job with
    sleeps of 2 then 8 s, so a job of 2 s costs 10."""
    job = sbatch(cluster, submit_dir, *args, env=env)
    return job, cluster.wait_job(job, JOB_TIMEOUT, poll=0.1)


def job_log(submit_dir, job_name, job_id):
    log = submit_dir / "runs" / f"{job_name}-{job_id}.log"
    assert log.exists(), f"no job log {log}; runs/ holds {os.listdir(submit_dir / 'runs')}"
    return log.read_text(errors="replace")


def load_state(path):
    """A checkpoint as {name: ndarray} (the format is mpigrad.save's, read by mpigrad.load)."""
    import mpigrad

    return {k: np.asarray(v.numpy()) for k, v in mpigrad.load(str(path)).items()}


def test_no_way_to_install_slurm_is_a_skip_reason(tmp_path, monkeypatch):
    """What the fixture skips with when apt-get fails (no network, say) or we are not root."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    apt = fake_bin / "apt-get"
    apt.write_text("#!/bin/sh\necho 'E: Could not resolve deb.debian.org' >&2\nexit 100\n")
    apt.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_bin))  # no Slurm here, and this apt-get fails
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    reason = ensure_installed(log=lambda msg: None)
    assert reason is not None
    assert "apt-get update" in reason and "exit 100" in reason, reason
    assert "Could not resolve" in reason, reason

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = ensure_installed(log=lambda msg: None)
    assert reason is not None and "not root" in reason, reason


def epoch_checkpoint_written(cluster, job, submit_dir, job_name):
    """Whether the job has written its first epoch's checkpoint; fails the test if the job
    is no longer running without one."""
    checkpoints = submit_dir / "runs" / job_name / "checkpoints"
    if (checkpoints / "ckpt-epoch0001.npz").exists():
        return True
    state = cluster.job(job)["JobState"]
    assert state in ("PENDING", "CONFIGURING", "RUNNING"), (
        state, job_log(submit_dir, job_name, job))
    return False


def wait_for_first_epoch(cluster, job, submit_dir, job_name):
    deadline = time.monotonic() + JOB_TIMEOUT
    while not epoch_checkpoint_written(cluster, job, submit_dir, job_name):
        assert time.monotonic() < deadline, "no checkpoint after epoch 1"
        time.sleep(0.1)


def test_train_job_finishes_with_expected_accuracy(cluster, submit_dir):
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(TRAIN_SBATCH),
                        "--epochs", str(EPOCHS), "--train-samples", str(TRAIN_SAMPLES))
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (
        f"{info}\n{log}{cluster.logs()}")
    assert info["NumTasks"] == "2", info

    # One line from rank 0 of a 2-rank world; two ranks that failed to find each other
    # (MPI not wired to srun) would each be a rank 0 and print it twice.
    finished = FINISHED.findall(log)
    assert len(finished) == 1, f"expected one 'training finished' line:\n{log}"
    epochs, accuracy = finished[0]
    assert int(epochs) == EPOCHS
    assert float(accuracy) >= 0.9, log
    assert len(re.findall(r"^\[rank 0\] epoch \d+/\d+ ", log, re.M)) == EPOCHS, log

    checkpoints = submit_dir / "runs" / "mpigrad-train" / "checkpoints"
    assert (checkpoints / "final.npz").exists(), sorted(os.listdir(checkpoints))
    assert (checkpoints / f"ckpt-epoch{EPOCHS:04d}.npz").exists()


def test_gpt_job_trains_under_srun_with_its_checkpoints(cluster, submit_dir):
    # The default model for a few steps: that it learns is test_train_gpt.py's to show.
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(GPT_SBATCH), "--steps", "4",
                        "--warmup", "1", "--eval-interval", "2", "--eval-batches", "2",
                        "--max-chars", "100000", "--sample-chars", "20")
    log = job_log(submit_dir, "mpigrad-gpt", job)
    assert info["ExitCode"] == "0:0", f"{info}\n{log}{cluster.logs()}"
    # One rank 0 of a 2-rank world (two 1-rank worlds would each print this line).
    assert log.count("training finished: steps=4") == 1, log
    assert "2 ranks x batch" in log, log
    checkpoints = submit_dir / "runs" / "mpigrad-gpt" / "checkpoints"
    assert {"ckpt-000002.npz", "ckpt-000004.npz", "final.npz"} <= set(os.listdir(checkpoints))


def test_word_lm_job_trains_one_two_rank_world_under_srun(cluster, submit_dir):
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(LM_SBATCH), "--epochs", "1",
                        "--max-words", "20000", "--vocab", "200", "--emsize", "16", "--nhid",
                        "16", "--batch-size", "8")
    log = job_log(submit_dir, "mpigrad-lm", job)
    assert info["ExitCode"] == "0:0", f"{info}\n{log}{cluster.logs()}"
    assert log.count("training finished") == 1, log  # one world, not two of one rank
    assert "2 ranks x 4 columns" in log and re.search(r"\| valid ppl [0-9.]+ \|", log), log


def test_srun_without_an_mpi_plugin_is_an_error_on_every_task(cluster, submit_dir):
    """`srun --mpi=none` starts each task as its own world of one: every task must stop at
    init_process_group saying which flag to add, not train alone as a rank 0."""
    env = dict(job_env(cluster), MPIGRAD_SRUN_MPI="none")
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(TRAIN_SBATCH), "--epochs", "1",
                        env=env)
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["ExitCode"] != "0:0", (info, log)
    # The preamble's --kill-on-bad-exit ends the other task once the first one fails, so on a
    # loaded machine the slower task may be killed before it reaches the check: each task
    # must have either stopped there or been terminated by srun, and at least one stopped.
    stopped = [f"srun started 2 tasks, but MPI's world on task {task} has 1 process" in log
               for task in (0, 1)]
    assert any(stopped), log
    for task, said in enumerate(stopped):
        assert said or re.search(rf"task {task}: (Terminated|Killed)", log), log
    assert "srun --mpi=pmi2" in log and "training finished" not in log


def test_failing_job_is_reported_as_failed(cluster, submit_dir):
    # train.py rejects the argument (argparse, exit code 2): the harness must see that.
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(TRAIN_SBATCH), "--epochs", "-1")
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["JobState"] == "FAILED", (info, log)
    assert info["ExitCode"] == "2:0", info
    assert not FINISHED.search(log), log


def test_missing_virtualenv_fails_with_a_clear_message(cluster, submit_dir):
    env = job_env(cluster, MPIGRAD_VENV=str(submit_dir / "no-such-venv"))
    job, info = run_job(cluster, submit_dir, "--ntasks=1", str(TRAIN_SBATCH), env=env)
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["ExitCode"] == "1:0", (info, log)
    assert "no virtualenv at" in log and "MPIGRAD_VENV" in log, log


def test_bench_job_runs(cluster, submit_dir):
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(BENCH_SBATCH),
                        "--steps", "2", "--rounds", "1", "--no-torch")
    log = job_log(submit_dir, "mpigrad-bench", job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log)
    assert re.search(r"^DDP benchmark: .*, 2 ranks,", log, re.M), log


# How each preempted job is stopped:
PREEMPTIONS = {
    # The default: srun, and the signal to the job steps, i.e. straight to the ranks, as
    # `#SBATCH --signal=USR1@120` does before the time limit.
    "srun": [],
    # The site-MPI variant: mpirun, and the signal to the batch shell, which passes it on.
    "mpirun": ["--batch"],
}


@pytest.fixture(scope="module")
def preempted_jobs(cluster, tmp_path_factory):
    """One preempted job per launcher and the uninterrupted reference run, all submitted at
    once: each preempted job waits some seconds to be requeued (Slurm holds a requeued job
    for its credentials' lifetime), and the others run meanwhile. The reference is the
    same computation for both launchers (same ranks, same MPI library, same seed).

    Returns {launcher: (submit directory, job id, its final `scontrol show job` fields)}
    and the reference's checkpoint directory."""
    args = ["--epochs", str(PREEMPT_EPOCHS), "--train-samples", str(PREEMPT_SAMPLES),
            "--seed", "3"]
    reference_dir = tmp_path_factory.mktemp("reference")
    (reference_dir / "runs").mkdir()
    reference = sbatch(cluster, reference_dir, "--ntasks=2", "--job-name=reference",
                       str(TRAIN_SBATCH), *args)
    submitted = {}
    for launcher in PREEMPTIONS:
        submit_dir = tmp_path_factory.mktemp(f"preempted-{launcher}")
        (submit_dir / "runs").mkdir()
        submitted[launcher] = submit_dir, sbatch(
            cluster, submit_dir, "--ntasks=2", "--job-name=preempted", str(TRAIN_SBATCH),
            *args, env=job_env(cluster, MPIGRAD_LAUNCHER=launcher))
    # Each is signalled as soon as its first epoch's checkpoint exists.
    waiting = dict(submitted)
    deadline = time.monotonic() + JOB_TIMEOUT
    while waiting:
        for launcher, (submit_dir, job) in list(waiting.items()):
            if epoch_checkpoint_written(cluster, job, submit_dir, "preempted"):
                cluster.run("scancel", *PREEMPTIONS[launcher], "--signal=USR1", str(job))
                del waiting[launcher]
        assert time.monotonic() < deadline, f"no checkpoint after epoch 1 from {waiting}"
        time.sleep(0.1)

    info = cluster.wait_job(reference, JOB_TIMEOUT, poll=0.1)
    assert info["JobState"] == "COMPLETED", (info, job_log(reference_dir, "reference",
                                                           reference))
    finished = {launcher: (submit_dir, job, cluster.wait_job(job, JOB_TIMEOUT, poll=0.1))
                for launcher, (submit_dir, job) in submitted.items()}
    return finished, reference_dir / "runs" / "reference" / "checkpoints"


@pytest.mark.parametrize("launcher", list(PREEMPTIONS))
def test_preempted_job_requeues_and_matches_uninterrupted_run(preempted_jobs, launcher):
    finished, reference = preempted_jobs
    submit_dir, job, info = finished[launcher]
    log = job_log(submit_dir, "preempted", job)
    assert f"launcher {launcher}," in log, log
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log)
    assert int(info["Restarts"]) == 1, (
        f"the job was not requeued exactly once (did training end before the signal "
        f"arrived? raise PREEMPT_EPOCHS): {info}\n{log}")
    assert "requeueing" in log, log
    checkpoints = submit_dir / "runs" / "preempted" / "checkpoints"
    assert (checkpoints / "ckpt-preempt.npz").exists(), sorted(os.listdir(checkpoints))
    assert len(FINISHED.findall(log)) == 1, log

    expected = load_state(reference / "final.npz")
    got = load_state(checkpoints / "final.npz")
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name].dtype == expected[name].dtype, name
        assert np.array_equal(got[name], expected[name]), (
            f"{name} differs after preemption and resume")


def test_cancelled_job_is_not_requeued_and_a_new_submission_resumes(cluster, submit_dir):
    args = ["--epochs", str(PREEMPT_EPOCHS), "--train-samples", str(PREEMPT_SAMPLES)]
    job = sbatch(cluster, submit_dir, "--ntasks=2", str(TRAIN_SBATCH), *args)
    checkpoints = submit_dir / "runs" / "mpigrad-train" / "checkpoints"
    wait_for_first_epoch(cluster, job, submit_dir, "mpigrad-train")
    cluster.run("scancel", str(job))  # SIGTERM to the ranks and to the batch script

    info = cluster.wait_job(job, JOB_TIMEOUT, poll=0.1)
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", (info, log)
    assert "not requeued" in log, log
    assert (checkpoints / "ckpt-preempt.npz").exists(), sorted(os.listdir(checkpoints))

    again, info = run_job(cluster, submit_dir, "--ntasks=2", str(TRAIN_SBATCH), *args)
    log = job_log(submit_dir, "mpigrad-train", again)
    assert info["JobState"] == "COMPLETED", (info, log)
    # (From ckpt-preempt.npz, or from an epoch checkpoint at the same position if the
    # signal came at an epoch's first step.)
    assert "resuming from" in log, log
    assert len(FINISHED.findall(log)) == 1, log
