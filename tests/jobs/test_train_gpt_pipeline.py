"""jobs/train_gpt.py --pipeline-stages: pipelines of 2 stages (one, and two data parallel)
train as one process with the global batch, and a preempted pipelined run resumes bit for
bit from its distributed checkpoint."""
import subprocess

import pytest

from tests.distributed._environment import job_environment
from tests.jobs.test_train_gpt import (GLOBAL_BATCH, MPIEXEC, STEPS, _assert_same, _command,
                                       _final, assert_preempted_run_resumes_bit_for_bit,
                                       reference_run)

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")


@pytest.mark.parametrize("ranks", [2, 4])
def test_pipelines_train_as_one_process_with_the_global_batch(text, ranks, one_process,
                                                              trained):
    replicas = ranks // 2
    directory, result = trained(ranks, *reference_run(text), "--batch-size",
                                str(GLOBAL_BATCH // replicas), "--pipeline-stages", "2")
    assert "pipelines of 2 stages" in result.stdout
    assert (directory / f"ckpt-{STEPS:06d}.dcp" / ".metadata").exists()
    _assert_same(one_process, _final(directory), atol=1e-10)


def test_a_preempted_pipelined_run_resumes_bit_for_bit(tmp_path, trained, text):
    # A DCP checkpoint is a directory; its metadata file is written last. One pipeline of
    # 2 stages: the configuration whose uninterrupted run the test above compares.
    assert_preempted_run_resumes_bit_for_bit(
        tmp_path, trained, text, ["--batch-size", str(GLOBAL_BATCH), "--pipeline-stages", "2"],
        ".dcp/.metadata")


def test_ranks_that_cannot_form_pipelines_are_refused(tmp_path, text):
    result = subprocess.run(_command(1, "--text", text, "--steps", "2", "--pipeline-stages",
                                     "2"), capture_output=True, text=True,
                            env=job_environment())
    assert result.returncode == 1
    assert "1 ranks cannot form pipelines of --pipeline-stages 2" in result.stdout
