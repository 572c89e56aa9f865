"""mpigrad.distributed.checkpoint at the suite's world size (1, 2 or 3 ranks): a save and load
through the shard files, resharding to other splits and to whole tensors, and the errors a
damaged checkpoint or mismatched state dicts raise on every rank."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.checkpoint as dcp

from tests.distributed._environment import job_environment

from ._states import flat_shard, model, sharded_state, train_step, trained


@pytest.fixture
def shared_dir():
    """A directory every rank sees (rank 0's temporary one), removed once every rank is done."""
    holder = [tempfile.mkdtemp(prefix="dcp-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(holder)
    yield holder[0]
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(holder[0])


def fresh_target(rank, world):
    """A fresh model's and optimizer's sharded state dict, after one step so the optimizer
    has state to load into, with every value changed from the saved one."""
    net, optimizer = trained(1)
    target = sharded_state(net, optimizer, rank, world)
    for shard in [*target["model"].values(),
                  *(v for s in target["optim"]["state"].values() for v in s.values()
                    if isinstance(v, dcp.FlatShard))]:
        with shard.local.writing() as array:
            array[...] = -7.0
    target["optim"]["param_groups"][0]["lr"] = 1.0
    return target


def expected_slice(array, shard):
    return np.asarray(array).reshape(-1)[shard.offset:shard.offset + shard.length]


def test_saved_shards_load_into_other_splits_and_whole_tensors(shared_dir, rank, size):
    net, optimizer = trained(3)
    dcp.save(sharded_state(net, optimizer, rank, size), checkpoint_id=shared_dir)
    assert sorted(os.listdir(shared_dir)) == [".metadata"] + [
        f"__{r}_0.distcp" for r in range(size)]

    # Resharded: every rank loads the split of a world of size + 1 (rank and rank + 1's).
    for pretend_rank in (rank, rank + 1):
        target = fresh_target(pretend_rank, size + 1)
        dcp.load(target, checkpoint_id=shared_dir)
        for name, value in net.state_dict().items():
            shard = target["model"][name]
            np.testing.assert_array_equal(shard.local._array[:shard.length],
                                          expected_slice(value._array, shard))
            assert np.all(shard.local._array[shard.length:] == -7.0)  # padding left alone
        saved = optimizer.state_dict()
        for index, values in saved["state"].items():
            assert target["optim"]["state"][index]["step"] == values["step"] == 3
            shard = target["optim"]["state"][index]["exp_avg_sq"]
            np.testing.assert_array_equal(shard.local._array[:shard.length],
                                          expected_slice(values["exp_avg_sq"]._array, shard))
        assert target["optim"]["param_groups"] == saved["param_groups"]

    # Whole: a fresh model and optimizer (empty state), loaded, step on as the original.
    fresh = model(seed=1)
    fresh_optimizer = mg.optim.AdamW(fresh.parameters(), lr=0.5)
    state = {"model": fresh.state_dict(), "optim": fresh_optimizer.state_dict()}
    dcp.load(state, checkpoint_id=shared_dir)
    fresh_optimizer.load_state_dict(state["optim"])
    reference, reference_optimizer = trained(4)
    train_step(fresh, fresh_optimizer, 3)
    for (name, mine), theirs in zip(fresh.state_dict().items(),
                                    reference.state_dict().values()):
        np.testing.assert_array_equal(mine._array, theirs._array, err_msg=name)


def test_a_save_by_fewer_ranks_removes_the_shards_of_the_others(shared_dir, rank, size):
    if rank == 0:
        for extra in (size, size + 1):
            open(os.path.join(shared_dir, f"__{extra}_0.distcp"), "wb").close()
    dcp.save({"n": 1}, checkpoint_id=shared_dir)
    assert sorted(os.listdir(shared_dir)) == [".metadata"] + [
        f"__{r}_0.distcp" for r in range(size)]


def test_replicated_tensors_and_values_round_trip(shared_dir, rank, size):
    weights = mg.tensor(np.arange(12.0).reshape(3, 4))
    state = {"w": weights, "empty": [], "nested": {"k": [1, 2.5, "x", None]},
             "array": np.arange(3), "tuple": (0.9, 0.99)}
    dcp.save(state, checkpoint_id=shared_dir)
    target = {"w": mg.zeros(3, 4, dtype=mg.float64), "empty": [5], "nested": {"k": []},
              "array": None, "tuple": None}
    w_before = target["w"]
    dcp.load(target, storage_reader=dcp.FileSystemReader(shared_dir))
    assert target["w"] is w_before
    np.testing.assert_array_equal(target["w"]._array, weights._array)
    assert target["empty"] == [] and target["nested"] == {"k": [1, 2.5, "x", None]}
    np.testing.assert_array_equal(target["array"], np.arange(3))
    assert target["tuple"] == (0.9, 0.99)


def test_a_damaged_or_missing_shard_is_a_value_error_naming_it_on_every_rank(
        shared_dir, rank, size):
    dcp.save({"s": flat_shard(np.arange(10.0), rank, size)}, checkpoint_id=shared_dir)
    last = os.path.join(shared_dir, f"__{size - 1}_0.distcp")
    target = {"s": mg.zeros(10, dtype=mg.float64)}  # every rank needs every shard
    dist.barrier()
    if rank == 0:
        with open(last, "r+b") as file:
            file.seek(os.path.getsize(last) // 2)
            byte = file.read(1)
            file.seek(-1, os.SEEK_CUR)
            file.write(bytes([byte[0] ^ 0xFF]))
    dist.barrier()
    with pytest.raises(ValueError, match=f"__{size - 1}_0.distcp"):
        dcp.load(target, checkpoint_id=shared_dir)
    assert np.all(target["s"]._array == 0)  # nothing written on a failed load
    dist.barrier()
    if rank == 0:
        os.remove(last)
    dist.barrier()
    with pytest.raises(ValueError, match=f"__{size - 1}_0.distcp is missing"):
        dcp.load(target, checkpoint_id=shared_dir)
    with pytest.raises(ValueError, match=r"\.metadata is missing"):
        dcp.load(target, checkpoint_id=os.path.join(shared_dir, "nowhere"))


def test_a_shard_from_another_save_is_refused(shared_dir, rank, size):
    dcp.save({"s": flat_shard(np.arange(4.0), rank, size)}, checkpoint_id=shared_dir)
    first = os.path.join(shared_dir, "__0_0.distcp")
    dist.barrier()
    if rank == 0:
        os.rename(first, first + ".old")
    dcp.save({"s": flat_shard(np.arange(4.0), rank, size)}, checkpoint_id=shared_dir)
    if rank == 0:
        os.replace(first + ".old", first)
    dist.barrier()
    with pytest.raises(ValueError, match="__0_0.distcp does not belong to this checkpoint"):
        dcp.load({"s": mg.zeros(4, dtype=mg.float64)}, checkpoint_id=shared_dir)


def test_ranks_holding_different_entries_as_pipeline_stages_do(shared_dir, rank, size):
    """Each rank its own layer and counter, a shared value and a tensor only the last two
    ranks hold; loaded at this world size by other ranks (reversed) and whole in each."""
    def own(r):
        return {f"layer{r}": mg.tensor(np.full((2, r + 1), float(r))), f"count{r}": 10 * r}

    shared = {"lr": 0.5, "pair": mg.tensor(np.arange(3.0))}
    dcp.save({**own(rank), **({"lr": 0.5} if rank == 0 else {}),
              **({"pair": shared["pair"]} if rank >= size - 2 else {})},
             checkpoint_id=shared_dir)
    other = size - 1 - rank
    target = {**{k: (mg.zeros(*v.shape, dtype=mg.float64) if isinstance(v, mg.Tensor) else None)
                 for k, v in own(other).items()},
              "lr": None, "pair": mg.zeros(3, dtype=mg.float64)}
    dcp.load(target, checkpoint_id=shared_dir)
    np.testing.assert_array_equal(target[f"layer{other}"]._array, own(other)[f"layer{other}"]._array)
    assert target[f"count{other}"] == 10 * other and target["lr"] == 0.5
    np.testing.assert_array_equal(target["pair"]._array, shared["pair"]._array)


def test_state_dicts_that_do_not_fit_together_fail_on_every_rank(shared_dir, rank, size):
    with pytest.raises(ValueError, match="no rank holds elements"):
        # Every rank claims the first slice: the rest of the tensor has no owner (at size 1
        # the slice is short by one element).
        local = mg.tensor(np.zeros(3))
        dcp.save({"s": dcp.FlatShard(local, (4,), 0) if rank == 0 else
                  dcp.FlatShard(local, (4,), 4)}, checkpoint_id=shared_dir)
    if size > 1:
        with pytest.raises(ValueError, match="rank 0: Tensor, rank 1: FlatShard"):
            dcp.save({"s": mg.zeros(4) if rank == 0 else
                      dcp.FlatShard(mg.zeros(4), (4,), 0)}, checkpoint_id=shared_dir)
        with pytest.raises(ValueError, match="inside another rank's slice"):
            dcp.save({"s": dcp.FlatShard(mg.tensor(np.zeros(3)), (3 * size,), 2 * rank)},
                     checkpoint_id=shared_dir)
    dcp.save({"w": mg.zeros(2, 3, dtype=mg.float64), "n": 1}, checkpoint_id=shared_dir)
    with pytest.raises(ValueError, match=r"Size mismatch between saved \(2, 3\) and current"):
        dcp.load({"w": mg.zeros(3, 2, dtype=mg.float64)}, checkpoint_id=shared_dir)
    with pytest.raises(RuntimeError, match="Missing key in checkpoint state_dict: other"):
        dcp.load({"w": mg.zeros(2, 3), "other": 1}, checkpoint_id=shared_dir)
    if size > 1:
        with pytest.raises(RuntimeError, match="rank 1: .*Missing key"):
            dcp.load({"w": mg.zeros(2, 3), **({"other": 1} if rank == 1 else {})},
                     checkpoint_id=shared_dir)


@pytest.mark.mpi_skip  # launches its own jobs of 3, 2 and 1 processes
def test_saved_at_three_ranks_loads_at_two_and_at_one(tmp_path):
    job = [sys.executable, str(Path(__file__).with_name("reshard_job.py"))]
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    directory = str(tmp_path / "checkpoint")
    for launcher, mode in (([mpiexec, "-n", "3"], "save"), ([mpiexec, "-n", "2"], "load"),
                           ([], "load")):
        result = subprocess.run(["timeout", "120", *launcher, *job, mode, directory],
                                capture_output=True, text=True, env=job_environment())
        assert result.returncode == 0, (launcher, mode, result.stdout, result.stderr)
        if mode == "load":
            ranks = int(launcher[-1]) if launcher else 1
            assert result.stdout.count("loaded and stepped as one process") == ranks
