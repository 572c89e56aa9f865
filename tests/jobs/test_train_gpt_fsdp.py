"""jobs/train_gpt.py --fsdp: the GPT sharded over 2 and 3 ranks trains as one process with the
global batch (clipping and gradient accumulation included), and a preempted sharded run
resumes bit for bit from its distributed checkpoint."""
import subprocess

import pytest

from tests.distributed._environment import job_environment
from tests.jobs.test_train_gpt import (GLOBAL_BATCH, MPIEXEC, _assert_same, _command, _final,
                                       assert_preempted_run_resumes_bit_for_bit, run,
                                       short_run)

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")


@pytest.mark.parametrize("ranks, reshard", [(2, []), (3, ["--no-reshard-after-forward"])])
def test_sharded_ranks_train_as_one_process_with_the_global_batch(tmp_path, text, ranks,
                                                                  reshard, one_process):
    # At 3 ranks most of the tiny GPT's parameters (16 wide) do not divide into equal shards.
    result = run(ranks, *short_run(text), "--batch-size", str(GLOBAL_BATCH // ranks), "--fsdp",
                 *reshard, "--checkpoint", str(tmp_path / "sharded"))
    assert ", FSDP;" in result.stdout
    assert (tmp_path / "sharded" / "ckpt-000003.dcp" / ".metadata").exists()
    _assert_same(one_process, _final(tmp_path / "sharded"), atol=1e-10)


def test_a_preempted_sharded_run_resumes_bit_for_bit(tmp_path, text):
    # A DCP checkpoint is a directory; its metadata file is written last.
    assert_preempted_run_resumes_bit_for_bit(tmp_path, text, ["--grad-accum", "2", "--fsdp"], ".dcp/.metadata")


def test_fsdp_with_pipeline_stages_is_refused(text):
    result = subprocess.run(_command(1, "--text", text, "--fsdp", "--pipeline-stages", "2"),
                            capture_output=True, text=True, env=job_environment())
    assert result.returncode == 2
    assert "--fsdp and --pipeline-stages are not combined" in result.stderr
