"""jobs/train.py end to end under mpiexec: accuracy, exact resume, signals, argument errors."""
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import mpigrad as mg
from tests.distributed._environment import job_environment

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "jobs" / "train.py")
MPIEXEC = shutil.which("mpiexec")
sys.path.insert(0, str(ROOT / "jobs"))  # the job imports its sibling common.py
import train  # noqa: E402

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")


def run_train(*args, ranks=2, timeout=240):
    return subprocess.run(["timeout", "-k", "10", str(timeout), MPIEXEC, "-n", str(ranks),
                           sys.executable, TRAIN, *args], capture_output=True, text=True,
                          env=job_environment())


def start_train(*args, ranks=2, timeout=240):
    """train.py under mpiexec in the background, under `timeout` so that it cannot hang."""
    return subprocess.Popen(["timeout", "-k", "10", str(timeout), MPIEXEC, "-n", str(ranks),
                             sys.executable, TRAIN, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=job_environment())


def signal_launcher(job, signum):
    """Send `signum` to the mpiexec under `job`'s `timeout` (which forwards only SIGTERM and
    the like); mpiexec (hydra) forwards SIGUSR1 to every rank, as srun does."""
    found = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True)
    for pid in found.stdout.split():
        os.kill(int(pid), signum)


def stop(job):
    """End a job the test started, if it still runs (`timeout` passes SIGTERM on)."""
    if job.poll() is None:
        job.terminate()
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()


def first_line(job, seconds):
    """The job's first line of output; fails the test if none comes within `seconds`."""
    lines = queue.Queue()
    threading.Thread(target=lambda: lines.put(job.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        pytest.fail(f"train.py printed nothing within {seconds} s")


def final_weights(directory):
    state = mg.load(os.path.join(directory, "final.npz"))
    return {k: v.numpy() for k, v in state.items()}


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_default_run_reaches_high_accuracy(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    result = run_train("--metrics", str(metrics))
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(r"\[rank 0\] training finished: epochs=3 test_accuracy=([0-9.]+)",
                      result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) >= 0.95
    assert "[rank 1]" not in result.stdout  # other ranks stay quiet
    assert len(metrics.read_text().splitlines()) == 3


def test_cnn_reaches_high_accuracy():
    result = run_train("--model", "cnn", "--train-samples", "4000", "--epochs", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = re.search(r"training finished: epochs=2 test_accuracy=([0-9.]+)", result.stdout)
    assert accuracy and float(accuracy.group(1)) >= 0.95, result.stdout


def test_resnet_with_synchronised_batchnorm_learns_under_two_ranks():
    result = run_train("--model", "resnet", "--sync-bn", "--train-samples", "3000", "--epochs",
                       "1", "--batch-size", "16", "--lr", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = re.search(r"training finished: epochs=1 test_accuracy=([0-9.]+)", result.stdout)
    # Chance is 0.1. One epoch of 3000 at batch 16 per rank (94 steps) at lr 0.1 reaches
    # 0.57-0.79 over seeds 0-6, so the test accuracy (BatchNorm's running statistics) is well
    # clear of 0.4, for half the CPU of two epochs at lr 0.05 (0.69-0.88); at lr 0.05 one
    # epoch ended at 0.44 on seed 0, and three epochs of 4000 at batch 64 at 0.32 on seed 4.
    assert accuracy and float(accuracy.group(1)) >= 0.4, result.stdout


# The uninterrupted run that the resumed ones must end equal to. Epochs of 6000 samples: the
# second lasts long enough for a signal sent when the first one's checkpoint appears.
UNINTERRUPTED = ["--train-samples", "6000", "--epochs", "2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The checkpoint directory of one UNINTERRUPTED run, shared by the tests that resume:
    its final weights, and its epoch checkpoints to resume from (each a copy, since a resumed
    run writes into its directory)."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    result = run_train(*UNINTERRUPTED, "--checkpoint", str(directory))
    assert result.returncode == 0, result.stderr[-3000:]
    return directory


def test_resume_after_an_epoch_gives_the_same_weights(tmp_path, uninterrupted):
    # What a run of --epochs 1 leaves: its epoch checkpoint (the same file whatever
    # --epochs was, since nothing before it depends on the number of epochs).
    shutil.copy(uninterrupted / "ckpt-epoch0001.npz", tmp_path)
    resumed = run_train(*UNINTERRUPTED, "--checkpoint", str(tmp_path), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {tmp_path / 'ckpt-epoch0001.npz'} at epoch 2" in resumed.stdout
    assert_same_weights(final_weights(uninterrupted), final_weights(tmp_path))


def test_sigusr1_mid_epoch_checkpoints_exits_99_and_resumes_exactly(tmp_path, uninterrupted):
    stopped = tmp_path / "stopped"
    job = start_train(*UNINTERRUPTED, "--checkpoint", str(stopped))
    try:
        deadline = time.time() + 120
        while not (stopped / "ckpt-epoch0001.npz").exists() and time.time() < deadline:
            time.sleep(0.05)
        signal_launcher(job, signal.SIGUSR1)
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    if job.returncode == 0:
        pytest.skip("the run finished before the signal arrived; nothing to resume")
    assert job.returncode == 99, err[-3000:]
    assert (stopped / "ckpt-preempt.npz").exists()
    assert "stopped by signal" in out

    resumed = run_train(*UNINTERRUPTED, "--checkpoint", str(stopped), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # A signal in the epoch's first step leaves a preempt checkpoint at the same position as
    # the epoch checkpoint; either may be chosen, and they hold the same state.
    assert "resuming from" in resumed.stdout
    assert_same_weights(final_weights(uninterrupted), final_weights(stopped))


def test_bad_arguments_exit_2_with_a_message(capsys):
    # The command line proper once; the second error by train.parse_args in this process,
    # which is what the script's command line runs, without another interpreter's start-up.
    result = subprocess.run([sys.executable, TRAIN, "--epochs", "-1"], capture_output=True,
                            text=True, env=job_environment())
    assert result.returncode == 2
    assert "--epochs: must be a positive integer" in result.stderr
    with pytest.raises(SystemExit) as exited:
        train.parse_args(["--resume"])
    assert exited.value.code == 2 and "--resume needs --checkpoint" in capsys.readouterr().err


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as exited:
        train.parse_args(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    for option in ("--model", "--dataset", "--data-dir", "--epochs", "--batch-size", "--lr",
                   "--seed", "--checkpoint", "--resume", "--metrics", "--timeline"):
        assert option in shown


def test_preempted_at_1_rank_resumes_at_2_ranks_with_the_rest_of_the_epoch(tmp_path):
    """The position is kept in samples of the epoch's order, so a resume at another world
    size trains on exactly the samples the first run had not reached, none skipped."""
    samples, checkpoint, metrics = 12000, tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    common = ["--train-samples", str(samples), "--epochs", "2", "--checkpoint",
              str(checkpoint), "--metrics", str(metrics)]
    job = start_train(*common, ranks=1)
    try:
        assert "training samples" in first_line(job, 120)  # the loop is about to start
        time.sleep(0.5)  # some steps into the first epoch
        signal_launcher(job, signal.SIGUSR1)
        out, err = job.communicate(timeout=120)
    finally:
        stop(job)
    assert job.returncode == 99, err[-3000:]
    position = mg.load(checkpoint / "ckpt-preempt.npz")["position"]
    epoch, done = position["epoch"], position["samples"]
    assert position["world_size"] == 1 and 0 <= done < samples and done % 64 == 0
    finished_before = metrics.read_text().splitlines() if metrics.exists() else []
    assert len(finished_before) == epoch

    resumed = run_train(*common, "--resume", ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"at epoch {epoch + 1}, sample {done} of {samples} (written by 1 ranks x batch "
            "64; now 2 ranks x batch 64)") in resumed.stdout
    rest_of_epoch, *later = [json.loads(line) for line in metrics.read_text().splitlines()][epoch:]
    assert rest_of_epoch["epoch"] == epoch + 1
    assert rest_of_epoch["samples"] == samples - done + (samples - done) % 2
    assert [m["samples"] for m in later] == [samples] * (1 - epoch)
    assert rest_of_epoch["accuracy"] > 0.5


@pytest.mark.parametrize("ranks", [1, 2])
def test_an_unwritable_checkpoint_directory_is_an_error_before_training(tmp_path, ranks):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory's parent should be")
    result = run_train("--checkpoint", str(blocker / "ckpt"), ranks=ranks, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"error: checkpoint directory {blocker / 'ckpt'} is not writable" in result.stdout
    assert "training samples" not in result.stdout  # stopped before the first step


def test_a_read_only_checkpoint_directory_is_an_error_before_training(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    directory = tmp_path / "ckpt"
    directory.mkdir(mode=0o500)
    result = run_train("--checkpoint", str(directory), ranks=2, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Permission denied" in result.stdout and "training samples" not in result.stdout


def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(tmp_path, uninterrupted):
    for name in ("ckpt-epoch0001.npz", "ckpt-epoch0002.npz"):
        shutil.copy(uninterrupted / name, tmp_path)
    newest = tmp_path / "ckpt-epoch0002.npz"
    damaged = bytearray(newest.read_bytes())
    damaged[len(damaged) // 2] ^= 0x10
    newest.write_bytes(bytes(damaged))
    resumed = run_train(*UNINTERRUPTED, "--checkpoint", str(tmp_path), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"warning: skipping a damaged checkpoint: {newest} is not a valid mpigrad "
            "checkpoint") in resumed.stdout
    assert f"resuming from {tmp_path / 'ckpt-epoch0001.npz'} at epoch 2" in resumed.stdout
    # and it trains the second epoch again from there, to the uninterrupted run's weights
    assert_same_weights(final_weights(uninterrupted), final_weights(tmp_path))
