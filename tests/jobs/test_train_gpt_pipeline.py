"""jobs/train_gpt.py --pipeline-stages: pipelines of 2 stages (one, and two data parallel)
train as one process with the global batch, and a preempted pipelined run resumes bit for
bit from its distributed checkpoint."""
import os
import signal
import subprocess
import time

import pytest

from tests.distributed._environment import job_environment
from tests.jobs.test_train_gpt import (GLOBAL_BATCH, MPIEXEC, _assert_same, _command,  # noqa: F401
                                       _final, run, text)

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")


@pytest.mark.parametrize("ranks", [2, 4])
def test_pipelines_train_as_one_process_with_the_global_batch(tmp_path, text, ranks):
    common = ["--text", text, "--steps", "3", "--eval-interval", "3", "--grad-accum", "2"]
    run(1, *common, "--batch-size", str(GLOBAL_BATCH), "--checkpoint", str(tmp_path / "one"))
    replicas = ranks // 2
    result = run(ranks, *common, "--batch-size", str(GLOBAL_BATCH // replicas),
                 "--pipeline-stages", "2", "--checkpoint", str(tmp_path / "piped"))
    assert "pipelines of 2 stages" in result.stdout
    assert (tmp_path / "piped" / "ckpt-000003.dcp" / ".metadata").exists()
    _assert_same(_final(tmp_path / "one"), _final(tmp_path / "piped"), atol=1e-10)


def test_a_preempted_pipelined_run_resumes_bit_for_bit(tmp_path, text):
    common = ["--text", text, "--steps", "40", "--eval-interval", "5", "--batch-size", "3",
              "--pipeline-stages", "2"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run(2, *common, "--checkpoint", str(straight))
    job = subprocess.Popen(_command(2, *common, "--checkpoint", str(stopped)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=job_environment())
    try:
        deadline = time.time() + 120
        while not (stopped / "ckpt-000005.dcp" / ".metadata").exists() and \
                time.time() < deadline:
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
    assert (stopped / "ckpt-preempt.dcp" / ".metadata").exists() and "stopped by signal" in out
    resumed = run(2, *common, "--checkpoint", str(stopped), "--resume")
    assert "resuming from" in resumed.stdout
    _assert_same(_final(straight), _final(stopped), atol=0)


def test_ranks_that_cannot_form_pipelines_are_refused(tmp_path, text):
    result = subprocess.run(_command(1, "--text", text, "--steps", "2", "--pipeline-stages",
                                     "2"), capture_output=True, text=True,
                            env=job_environment())
    assert result.returncode == 1
    assert "1 ranks cannot form pipelines of --pipeline-stages 2" in result.stdout
