"""jobs/train_gpt.py --fsdp: the GPT sharded over 2 and 3 ranks trains as one process with the
global batch (clipping and gradient accumulation included), and a preempted sharded run
resumes bit for bit from its distributed checkpoint."""
import subprocess

import pytest

from tests.distributed._environment import job_environment
from tests.jobs.test_train_gpt import (GLOBAL_BATCH, MPIEXEC, STEPS, _assert_same, _command,
                                       _final, assert_preempted_run_resumes_bit_for_bit,
                                       reference_run)

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")


@pytest.mark.parametrize("ranks, reshard", [(2, []), (3, ["--no-reshard-after-forward"])])
def test_sharded_ranks_train_as_one_process_with_the_global_batch(text, ranks, reshard,
                                                                  one_process, trained):
    # At 3 ranks most of the tiny GPT's parameters (16 wide) do not divide into equal shards.
    directory, result = trained(ranks, *reference_run(text), "--batch-size",
                                str(GLOBAL_BATCH // ranks), "--fsdp", *reshard)
    assert ", FSDP;" in result.stdout
    assert (directory / f"ckpt-{STEPS:06d}.dcp" / ".metadata").exists()
    _assert_same(one_process, _final(directory), atol=1e-10)


def test_a_preempted_sharded_run_resumes_bit_for_bit(tmp_path, trained, text):
    # A DCP checkpoint is a directory; its metadata file is written last.
    assert_preempted_run_resumes_bit_for_bit(
        tmp_path, trained, text, ["--batch-size", str(GLOBAL_BATCH // 2), "--fsdp"],
        ".dcp/.metadata")


def test_fsdp_with_pipeline_stages_is_refused(text):
    result = subprocess.run(_command(1, "--text", text, "--fsdp", "--pipeline-stages", "2"),
                            capture_output=True, text=True, env=job_environment())
    assert result.returncode == 2
    assert "--fsdp and --pipeline-stages are not combined" in result.stderr
