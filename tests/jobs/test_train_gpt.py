"""jobs/train_gpt.py end to end: N ranks equal one process with the same global batch, and a
preempted run resumes bit for bit."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mpigrad as mg
from tests.distributed._environment import job_environment

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "jobs" / "train_gpt.py")
MPIEXEC = shutil.which("mpiexec")

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")

GLOBAL_BATCH = 6
STEPS = 20
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
        "--eval-batches", "1", "--sample-chars", "0", "--dtype", "float64", "--warmup", "1"]


def _command(ranks, *args, timeout=240):
    return ["timeout", "-k", "10", str(timeout), MPIEXEC, "-n", str(ranks), sys.executable,
            JOB, *TINY, *args]


def run(ranks, *args):
    result = subprocess.run(_command(ranks, *args), capture_output=True, text=True,
                            env=job_environment())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def _final(directory):
    return mg.load(directory / "final.npz")


def _assert_same(a, b, atol):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=0, atol=atol,
                                   err_msg=name)


def reference_run(text):
    """The options of the run that N ranks and one process must end alike: 2 micro-batches a
    step, a checkpoint every 5 steps, and steps enough after the first one that a signal sent
    when it appears stops the run before its end (at step 6 as measured; 15 steps cost about
    0.2 s of CPU a run, next to about 1.3 s per rank for a launch)."""
    return ["--text", text, "--steps", str(STEPS), "--eval-interval", "5", "--grad-accum", "2"]


# `text` (the training text), `trained` (one launch per configuration of train_gpt.py in the
# session) and `one_process` (the reference run's final weights in one process with the
# whole global batch) are session fixtures in conftest.py, shared with the --fsdp and
# --pipeline-stages tests, which compare with the same one-process run.


@pytest.mark.parametrize("ranks", [2, 3])
def test_n_ranks_train_as_one_process_with_the_global_batch(text, ranks, one_process, trained):
    directory, result = trained(ranks, *reference_run(text), "--batch-size",
                                str(GLOBAL_BATCH // ranks))
    assert f"training finished: steps={STEPS}" in result.stdout
    _assert_same(one_process, _final(directory), atol=1e-10)


def test_the_default_sized_model_learns(tmp_path, text):
    """A short run of the real shape (not the tiny one): the validation loss falls.

    30 steps, evaluated at 10, 20 and 30: over seeds 0-2 the loss falls 0.37-0.61 from the
    first evaluation to the last, against the 0.2 asked for (60 steps evaluated at 20, 40
    and 60 fell 0.29 on seed 0: twice the CPU for less margin)."""
    metrics = tmp_path / "metrics.jsonl"
    result = subprocess.run(
        ["timeout", "-k", "10", "240", MPIEXEC, "-n", "2", sys.executable, JOB, "--text", text,
         "--steps", "30", "--warmup", "5", "--eval-interval", "10", "--sample-chars", "40",
         "--metrics", str(metrics)], capture_output=True, text=True, env=job_environment())
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert rows[-1]["val_loss"] < rows[0]["val_loss"] - 0.2, rows
    assert "sample:" in result.stdout


def assert_preempted_run_resumes_bit_for_bit(tmp_path, trained, text, options, suffix=".npz"):
    """Stop a 2-rank reference run (with `options`) by SIGUSR1 after its step-5 checkpoint (a
    `suffix` file or directory), resume it, and compare its final weights with the
    uninterrupted run's (the one the N-ranks test compares with one process), bit for bit."""
    common = [*reference_run(text), *options]
    straight, _ = trained(2, *common)
    stopped = tmp_path / "stopped"
    job = subprocess.Popen(_command(2, *common, "--checkpoint", str(stopped)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=job_environment())
    try:
        deadline = time.time() + 120
        while not (stopped / f"ckpt-000005{suffix}").exists() and time.time() < deadline:
            time.sleep(0.02)
        for pid in subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True,
                                  text=True).stdout.split():
            os.kill(int(pid), signal.SIGUSR1)  # to mpiexec, which forwards it to every rank
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    if job.returncode == 0:
        pytest.skip("the run finished before the signal arrived; nothing to resume")
    assert job.returncode == 99, err[-3000:]
    assert (stopped / f"ckpt-preempt{suffix}").exists() and "stopped by signal" in out
    resumed = run(2, *common, "--checkpoint", str(stopped), "--resume")
    assert "resuming from" in resumed.stdout
    _assert_same(_final(straight), _final(stopped), atol=0)


def test_a_preempted_run_resumes_bit_for_bit(tmp_path, trained, text):
    assert_preempted_run_resumes_bit_for_bit(tmp_path, trained, text,
                                             ["--batch-size", str(GLOBAL_BATCH // 2)])


def test_resuming_with_another_global_batch_is_refused(tmp_path, trained, text):
    one, _ = trained(1, *reference_run(text), "--batch-size", str(GLOBAL_BATCH))
    shutil.copy(one / f"ckpt-{STEPS:06d}.npz", tmp_path)  # a copy: a resume writes there
    result = subprocess.run(_command(1, *reference_run(text), "--batch-size", "2", "--resume",
                                     "--checkpoint", str(tmp_path)), capture_output=True,
                            text=True, env=job_environment())
    assert result.returncode == 1
    assert f"global batch of {GLOBAL_BATCH}" in result.stdout
