"""init_process_group with torch's signature, names and errors, and the torch.distributed
helpers scripts call around it. Runs serially and under mpiexec -n 2 and -n 3."""
import warnings

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.distributed import process_group
from mpigrad.launchers import LOCAL_RANK_VARIABLES, mpi_launcher


@pytest.fixture
def fresh(process_group, rank, size, monkeypatch):
    """No default group during the test; the session's is back afterwards."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    dist.destroy_process_group()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group()


def _sum_of_ranks():
    t = mg.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return t.item()


@pytest.mark.parametrize("backend", ["gloo", "nccl", "cpu:gloo,cuda:nccl", "GLOO", "mpi",
                                     dist.Backend.GLOO, dist.Backend("nccl")],
                         ids=lambda name: f"backend={name}")
def test_backend_names_run_over_mpi_with_a_one_time_note(fresh, monkeypatch, backend, size):
    monkeypatch.setattr(process_group, "_noted_backends", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.init_process_group(backend)
        dist.destroy_process_group()
        dist.init_process_group(backend=backend)
    notes = [w for w in caught if "runs every backend over MPI" in str(w.message)]
    assert len(notes) == (0 if str(backend).lower() == "mpi" else 1)
    # torch's answer: the backend the script asked for (MPI carries it here)
    assert dist.get_backend() == str(backend).lower()
    assert dist.get_backend(dist.new_group()) == str(backend).lower()
    assert dist.get_backend(dist.new_group(backend="nccl")) == "nccl"
    assert _sum_of_ranks() == size * (size - 1) / 2


def test_unknown_backend_is_torchs_value_error(fresh):
    with pytest.raises(ValueError, match="Invalid backend: 'floo'"):
        dist.init_process_group("floo")
    assert not dist.is_initialized()


def test_rank_and_world_size_that_agree_with_mpi_are_accepted(fresh, rank, size):
    dist.init_process_group("gloo", rank=rank, world_size=size)
    assert (dist.get_rank(), dist.get_world_size()) == (rank, size)


def test_rank_or_world_size_that_disagree_with_mpi_name_both(fresh, rank, size):
    with pytest.raises(ValueError, match=rf"world_size={size + 1}\) disagrees with MPI, whose "
                                         rf"world has {size} process"):
        dist.init_process_group("gloo", rank=rank, world_size=size + 1)
    if size > 1:
        other = (rank + 1) % size
        with pytest.raises(ValueError, match=rf"rank={other}\) disagrees with MPI, which made "
                                             rf"this process rank {rank}"):
            dist.init_process_group("gloo", rank=other, world_size=size)
    assert not dist.is_initialized()


def test_a_world_of_one_when_several_were_asked_for_says_how_to_launch(fresh, monkeypatch, size):
    if size != 1:
        pytest.skip("only a one-process world can be too small")
    with pytest.raises(ValueError, match="(?s)world_size=2.*could not join this process.*"
                                         "mpiexec -n N"):
        dist.init_process_group("gloo", rank=0, world_size=2)
    with monkeypatch.context() as patched:
        patched.setenv("WORLD_SIZE", "2")
        with pytest.raises(ValueError, match="(?s)WORLD_SIZE=2 is set, but MPI's world has 1.*"
                                             "torchrun"):
            dist.init_process_group()


def test_mpi_backend_ignores_rank_and_world_size_with_torchs_warning(fresh, size):
    with pytest.warns(UserWarning, match=r"For MPI backend, world_size \(0\) and rank \(0\) are "
                                         "ignored"):
        dist.init_process_group("mpi", rank=0, world_size=0)
    assert dist.get_world_size() == size


def test_init_method_urls_are_checked_as_torch_reads_them(fresh, size, tmp_path):
    dist.init_process_group(init_method="env://" if mpi_launcher() else None)
    dist.destroy_process_group()
    if mpi_launcher() is None:
        with pytest.raises(ValueError, match="env://.*WORLD_SIZE is not set"):
            dist.init_process_group(init_method="env://")
        with pytest.raises(ValueError, match="needs rank and world_size"):
            dist.init_process_group(init_method="tcp://127.0.0.1:23456")
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous",
                                rank=0, world_size=1)
        assert dist.get_world_size() == 1


def test_other_torch_arguments(fresh):
    with pytest.raises(ValueError, match="store= is not supported"):
        dist.init_process_group(store=object(), rank=0, world_size=1)
    with pytest.raises(ValueError, match="CPU only"):
        dist.init_process_group(device_id=mg.device("cuda", 0))
    with pytest.raises(TypeError, match="timedelta"):
        dist.init_process_group(timeout=5)
    dist.init_process_group(group_name="mine", pg_options=None, device_id=mg.device("cpu"))
    assert dist.is_initialized()


def test_before_init_the_errors_are_torchs_value_errors(fresh):
    for call in (dist.get_rank, dist.get_world_size, lambda: dist.all_reduce(np.zeros(1)),
                 dist.barrier):
        with pytest.raises(ValueError, match="Default process group has not been initialized"):
            call()


def test_node_local_rank_and_default_backend(monkeypatch, process_group):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert dist.get_node_local_rank() == 3
    for name in LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert dist.get_node_local_rank() == dist.get_local_rank()
    assert dist.get_node_local_rank(fallback_rank=7) == dist.get_local_rank()
    assert dist.get_default_backend_for_device("cpu") == "mpi"
    assert dist.get_default_backend_for_device(mg.device("cpu")) == "mpi"
    with pytest.raises(ValueError, match="Default backend not registered for device : cuda"):
        dist.get_default_backend_for_device("cuda")


def test_reduce_op_is_torchs_deprecated_alias(process_group, size):
    with pytest.warns(FutureWarning, match="reduce_op` is deprecated"):
        op = dist.reduce_op.SUM
    assert op is dist.ReduceOp.SUM
    t = mg.ones(1)
    dist.all_reduce(t, op=op)
    assert t.item() == size
