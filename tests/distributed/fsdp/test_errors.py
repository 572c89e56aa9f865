"""FSDP's faults: ranks that sharded different modules get the same clear error at the
first collective instead of exchanging garbage, and a rank that stops leaves the others
waiting only until the watchdog ends the job, naming the unit they waited for."""
import os
import subprocess
import sys

import pytest

import mpigrad as mg
from mpigrad.distributed.fsdp import fully_shard

from .._environment import job_environment
from ._gpt import batches, build

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi(min_size=2)
def test_different_modules_are_an_error_on_every_rank(rank, size):
    model = build()
    fully_shard(model.h[0])
    if rank != 0:
        fully_shard(model.h[1])
    fully_shard(model)
    (idx, targets), = batches(1, 1)[0]
    with pytest.raises(RuntimeError) as info:
        model(mg.tensor(idx), mg.tensor(targets))
    message = str(info.value)
    assert "sharded different modules" in message
    # Rank 0's root unit took h.1's parameters too: that is the first difference.
    assert "The first difference is unit 0" in message
    others = "ranks [1]" if size == 2 else "ranks [1, 2]"
    assert "ranks [0]: unit 0 'the root unit' with 16 parameters" in message
    assert f"{others}: unit 0 'the root unit' with 4 parameters" in message


def test_modules_of_one_dtype_per_unit(rank, size):
    model = build()
    model.ln_f.weight._array = model.ln_f.weight._array.astype("float32")
    with pytest.raises(TypeError, match="share a dtype"):
        fully_shard(model)
    with pytest.raises(ValueError, match="already applied"):
        fully_shard(fully_shard(build()))


@pytest.mark.mpi_skip  # launches its own MPI job
def test_a_stopped_rank_ends_the_job_naming_the_unit():
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    try:
        result = subprocess.run(["timeout", "-k", "10", "90", mpiexec, "-n", "2",
                                 sys.executable, os.path.join(HERE, "_stall.py")],
                                capture_output=True, text=True, timeout=120,
                                env=job_environment(MPIGRAD_STALL_SECONDS=0))
    except subprocess.TimeoutExpired:
        pytest.fail("the job did not end within 120 s (a hang)")
    output = result.stdout + result.stderr
    assert result.returncode not in (0, 124), output
    assert "READY 0" in output and "READY 1" in output and "NOT REACHED" not in output
    assert "FSDP: all-gather of the parameters of the root unit" in output, output
