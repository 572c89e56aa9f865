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

# The training runs: a quarter of the default synthetic dataset (the default 12000 samples
# only take longer), and enough epochs that a job is still running when the signal sent
# after its first epoch arrives (9 epochs of 3000 samples after it: about a second on a quiet
# machine). A job's seconds go to its start and its first epoch, not to these samples.
# One run of them is both the accuracy test's job and the preempted jobs' uninterrupted
# reference: test accuracy 0.952 at its seed 3, 0.950-0.966 over seeds 0-6 (the bar is 0.9).
TRAIN_EPOCHS = 10
TRAIN_ARGS = ["--epochs", str(TRAIN_EPOCHS), "--train-samples", "3000"]
REFERENCE_SEED = "3"
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
    # As many CPUs as the `jobs` fixture has tasks running at once (17), so none waits for
    # another to end; the ranks share this machine's cores.
    c = SlurmCluster(workdir, cpus=17)
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


class Jobs:
    """Jobs by name, each submitted from a directory of its own, and waited for by name."""

    def __init__(self, cluster, tmp_path_factory):
        self.cluster = cluster
        self._tmp = tmp_path_factory
        self.submitted = {}  # name: (submit directory, job id)

    def submit(self, name, *args, env=None, submit_dir=None):
        """sbatch `args` from `submit_dir` (default: a new directory)."""
        if submit_dir is None:
            submit_dir = self._tmp.mktemp(name)
            (submit_dir / "runs").mkdir()  # Slurm does not create the directory of --output
        self.submitted[name] = submit_dir, sbatch(self.cluster, submit_dir, *args, env=env)

    def result(self, name):
        """(submit directory, job id, final `scontrol show job` fields) of job `name`."""
        submit_dir, job = self.submitted[name]
        return submit_dir, job, self.cluster.wait_job(job, JOB_TIMEOUT, poll=0.1)

    def stop_after_first_epoch(self, stops):
        """stops: {name: (the job's Slurm job name, scancel options)}. Runs scancel with the
        options on each job as soon as it has written its first epoch's checkpoint."""
        waiting = dict(stops)
        deadline = time.monotonic() + JOB_TIMEOUT
        while waiting:
            states = self.cluster.jobs()
            for name, (job_name, scancel_options) in list(waiting.items()):
                submit_dir, job = self.submitted[name]
                if epoch_checkpoint_written(states[job], submit_dir, job_name, job):
                    self.cluster.run("scancel", *scancel_options, str(job))
                    del waiting[name]
            assert time.monotonic() < deadline, f"no checkpoint after epoch 1 from {waiting}"
            time.sleep(0.1)


def epoch_checkpoint_written(state, submit_dir, job_name, job):
    """Whether the job has written its first epoch's checkpoint; fails the test if the job
    (whose `scontrol show job` fields were `state` a moment ago) has ended without one."""
    checkpoints = submit_dir / "runs" / job_name / "checkpoints"
    if (checkpoints / "ckpt-epoch0001.npz").exists():
        return True
    assert state["JobState"] in ("PENDING", "CONFIGURING", "RUNNING"), (
        state, job_log(submit_dir, job_name, job))
    return False


# How each preempted job is stopped:
PREEMPTIONS = {
    # The default: srun, and the signal to the job steps, i.e. straight to the ranks, as
    # `#SBATCH --signal=USR1@120` does before the time limit.
    "srun": [],
    # The site-MPI variant: mpirun, and the signal to the batch shell, which passes it on.
    "mpirun": ["--batch"],
}


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory):
    """Every job of this module but the benchmark (which wants the node to itself), submitted
    together so that the seconds one job waits are spent running the others: Slurm starts a
    job at its next scheduling pass (once a second, and the first only about 3 s after the
    controller starts), and holds a requeued job for its credentials' lifetime plus a second
    (6 s here).

    First the jobs stopped after their first epoch: one preempted job per launcher, the
    cancelled job, and the uninterrupted run the preempted jobs are compared with (which is
    also the accuracy test's job). Once they are signalled, the jobs that run straight
    through, while the preempted ones are held; once the cancelled job has ended, its second
    submission. The tests wait for their own job with `jobs.result(name)`."""
    submitted = Jobs(cluster, tmp_path_factory)
    submitted.submit("train", "--ntasks=2", str(TRAIN_SBATCH), *TRAIN_ARGS,
                     "--seed", REFERENCE_SEED)
    stops = {}
    for launcher, scancel_options in PREEMPTIONS.items():
        submitted.submit(f"preempted-{launcher}", "--ntasks=2", "--job-name=preempted",
                         str(TRAIN_SBATCH), *TRAIN_ARGS, "--seed", REFERENCE_SEED,
                         env=job_env(cluster, MPIGRAD_LAUNCHER=launcher))
        stops[f"preempted-{launcher}"] = "preempted", [*scancel_options, "--signal=USR1"]
    submitted.submit("cancelled", "--ntasks=2", str(TRAIN_SBATCH), *TRAIN_ARGS)
    # A plain scancel: SIGTERM to the ranks and to the batch script.
    stops["cancelled"] = "mpigrad-train", []
    submitted.stop_after_first_epoch(stops)

    # The default model for a few steps: that it learns is test_train_gpt.py's to show.
    submitted.submit("gpt", "--ntasks=2", str(GPT_SBATCH), "--steps", "4", "--warmup", "1",
                     "--eval-interval", "2", "--eval-batches", "2", "--max-chars", "100000",
                     "--sample-chars", "20")
    submitted.submit("word-lm", "--ntasks=2", str(LM_SBATCH), "--epochs", "1",
                     "--max-words", "20000", "--vocab", "200", "--emsize", "16", "--nhid", "16",
                     "--batch-size", "8")
    submitted.submit("srun-mpi-none", "--ntasks=2", str(TRAIN_SBATCH), "--epochs", "1",
                     env=dict(job_env(cluster), MPIGRAD_SRUN_MPI="none"))
    # train.py rejects the argument (argparse, exit code 2): the harness must see that.
    submitted.submit("failing", "--ntasks=2", str(TRAIN_SBATCH), "--epochs", "-1")
    no_venv = tmp_path_factory.getbasetemp() / "no-such-venv"
    submitted.submit("missing-venv", "--ntasks=1", str(TRAIN_SBATCH),
                     env=job_env(cluster, MPIGRAD_VENV=str(no_venv)))

    submit_dir, _, _ = submitted.result("cancelled")
    submitted.submit("cancelled-again", "--ntasks=2", str(TRAIN_SBATCH), *TRAIN_ARGS,
                     submit_dir=submit_dir)
    return submitted


def test_train_job_finishes_with_expected_accuracy(jobs):
    submit_dir, job, info = jobs.result("train")
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (
        f"{info}\n{log}{jobs.cluster.logs()}")
    assert info["NumTasks"] == "2", info

    # One line from rank 0 of a 2-rank world; two ranks that failed to find each other
    # (MPI not wired to srun) would each be a rank 0 and print it twice.
    finished = FINISHED.findall(log)
    assert len(finished) == 1, f"expected one 'training finished' line:\n{log}"
    epochs, accuracy = finished[0]
    assert int(epochs) == TRAIN_EPOCHS
    assert float(accuracy) >= 0.9, log
    assert len(re.findall(r"^\[rank 0\] epoch \d+/\d+ ", log, re.M)) == TRAIN_EPOCHS, log

    checkpoints = submit_dir / "runs" / "mpigrad-train" / "checkpoints"
    assert (checkpoints / "final.npz").exists(), sorted(os.listdir(checkpoints))
    assert (checkpoints / f"ckpt-epoch{TRAIN_EPOCHS:04d}.npz").exists()


def test_gpt_job_trains_under_srun_with_its_checkpoints(jobs):
    submit_dir, job, info = jobs.result("gpt")
    log = job_log(submit_dir, "mpigrad-gpt", job)
    assert info["ExitCode"] == "0:0", f"{info}\n{log}{jobs.cluster.logs()}"
    # One rank 0 of a 2-rank world (two 1-rank worlds would each print this line).
    assert log.count("training finished: steps=4") == 1, log
    assert "2 ranks x batch" in log, log
    checkpoints = submit_dir / "runs" / "mpigrad-gpt" / "checkpoints"
    assert {"ckpt-000002.npz", "ckpt-000004.npz", "final.npz"} <= set(os.listdir(checkpoints))


def test_word_lm_job_trains_one_two_rank_world_under_srun(jobs):
    submit_dir, job, info = jobs.result("word-lm")
    log = job_log(submit_dir, "mpigrad-lm", job)
    assert info["ExitCode"] == "0:0", f"{info}\n{log}{jobs.cluster.logs()}"
    assert log.count("training finished") == 1, log  # one world, not two of one rank
    assert "2 ranks x 4 columns" in log and re.search(r"\| valid ppl [0-9.]+ \|", log), log


def test_srun_without_an_mpi_plugin_is_an_error_on_every_task(jobs):
    """`srun --mpi=none` starts each task as its own world of one: every task must stop at
    init_process_group saying which flag to add, not train alone as a rank 0."""
    submit_dir, job, info = jobs.result("srun-mpi-none")
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


def test_failing_job_is_reported_as_failed(jobs):
    submit_dir, job, info = jobs.result("failing")
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["JobState"] == "FAILED", (info, log)
    assert info["ExitCode"] == "2:0", info
    assert not FINISHED.search(log), log


def test_missing_virtualenv_fails_with_a_clear_message(jobs):
    submit_dir, job, info = jobs.result("missing-venv")
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["ExitCode"] == "1:0", (info, log)
    assert "no virtualenv at" in log and "MPIGRAD_VENV" in log, log


@pytest.mark.parametrize("launcher", list(PREEMPTIONS))
def test_preempted_job_requeues_and_matches_uninterrupted_run(jobs, launcher):
    submit_dir, job, info = jobs.result(f"preempted-{launcher}")
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

    reference_dir, reference, reference_info = jobs.result("train")
    assert reference_info["JobState"] == "COMPLETED", (
        reference_info, job_log(reference_dir, "mpigrad-train", reference))
    expected = load_state(reference_dir / "runs" / "mpigrad-train" / "checkpoints"
                          / "final.npz")
    got = load_state(checkpoints / "final.npz")
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name].dtype == expected[name].dtype, name
        assert np.array_equal(got[name], expected[name]), (
            f"{name} differs after preemption and resume")


def test_cancelled_job_is_not_requeued_and_a_new_submission_resumes(jobs):
    submit_dir, job, info = jobs.result("cancelled")
    checkpoints = submit_dir / "runs" / "mpigrad-train" / "checkpoints"
    log = job_log(submit_dir, "mpigrad-train", job)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", (info, log)
    assert "not requeued" in log, log
    # Written by the cancelled run: the second submission (which may have run by now) is
    # not signalled and writes none.
    assert (checkpoints / "ckpt-preempt.npz").exists(), sorted(os.listdir(checkpoints))

    submit_dir, again, info = jobs.result("cancelled-again")
    log = job_log(submit_dir, "mpigrad-train", again)
    assert info["JobState"] == "COMPLETED", (info, log)
    # (From ckpt-preempt.npz, or from an epoch checkpoint at the same position if the
    # signal came at an epoch's first step.)
    assert "resuming from" in log, log
    assert len(FINISHED.findall(log)) == 1, log


# Last: the benchmark asks for the node to itself (--exclusive), so it starts once the
# `jobs` fixture's jobs have ended.
def test_bench_job_runs(cluster, submit_dir):
    job, info = run_job(cluster, submit_dir, "--ntasks=2", str(BENCH_SBATCH),
                        "--steps", "2", "--rounds", "1", "--no-torch")
    log = job_log(submit_dir, "mpigrad-bench", job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log)
    assert re.search(r"^DDP benchmark: .*, 2 ranks,", log, re.M), log
