"""DDP's default reduction on one host: buckets in memory the ranks share
(algorithms/ddp_comm_hooks/shared_memory.py), and its agreed fallback to MPI."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
from mpigrad import nn
from mpigrad.distributed.algorithms import Join
from mpigrad.distributed.algorithms.ddp_comm_hooks import shared_memory
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

from .._environment import job_environment
from ._models import MLP, mse, params_of, regression_data
from .test_ddp import assert_identical_across_ranks, assert_matches_oracle, global_batches, train


def segments_on_disk():
    MPI.COMM_WORLD.Barrier()  # rank 0 removes the file once every rank has mapped it
    return sorted(name for name in os.listdir(shared_memory._DIRECTORY)
                  if name.startswith("mpigrad-ddp-"))


@pytest.mark.mpi(min_size=2)
def test_the_segment_is_unlinked_once_every_rank_mapped_it(rank, size):
    before = segments_on_disk()
    model = DDP(MLP(seed=rank))
    assert model.reducer.shared is not None
    assert segments_on_disk() == before
    batches = global_batches(size)
    train(model, batches, rank)
    assert_matches_oracle(model, batches)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("failing_rank", [0, 1])
def test_a_rank_without_shared_memory_makes_every_rank_use_mpi(rank, size, failing_rank,
                                                              monkeypatch):
    """Rank 0 cannot reserve the file (a full /dev/shm), or rank 1 cannot map it: every rank
    falls back to MPI at construction, the rank that failed says why, training is right."""
    def no_space(*args):
        raise OSError(28, "No space left on device")
    if rank == failing_rank:
        monkeypatch.setattr(shared_memory.os if rank == 0 else shared_memory,
                            "posix_fallocate" if rank == 0 else "_map", no_space)
    before = segments_on_disk()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = DDP(MLP(seed=rank))
    said = [w for w in caught if "no shared memory" in str(w.message)]
    assert len(said) == (1 if rank == failing_rank else 0)
    if said:
        assert "No space left on device" in str(said[0].message)
        assert shared_memory.ENV in str(said[0].message)
    assert model.reducer.shared is None
    assert segments_on_disk() == before
    batches = global_batches(size)
    train(model, batches, rank)
    assert_matches_oracle(model, batches)


@pytest.mark.mpi(min_size=2)
def test_not_used_where_stores_may_be_reordered(rank, monkeypatch):
    monkeypatch.setattr(shared_memory.platform, "machine", lambda: "aarch64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DDP(MLP(seed=0)).reducer.shared is None


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("saying_no", ["every rank", "the last rank"])
def test_turned_off_by_the_environment(rank, size, monkeypatch, saying_no):
    if saying_no == "every rank" or rank == size - 1:
        monkeypatch.setenv(shared_memory.ENV, "0")
    assert DDP(MLP(seed=0)).reducer.shared is None


class TwoDtypes(nn.Module):
    """A float32 and a float64 branch: buckets of two dtypes side by side in the segment."""

    def __init__(self, seed):
        super().__init__()
        self.f32 = MLP(sizes=(5, 67, 3), seed=seed, dtype=np.float32)
        self.f64 = MLP(sizes=(5, 9, 3), seed=seed + 1)

    def forward(self, x):
        return self.f32(x.float()).double() + self.f64(x)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_cap_mb", [0, 25], ids=["one-per-bucket", "whole-model"])
def test_buckets_of_two_dtypes_match_one_process(rank, size, bucket_cap_mb):
    model = DDP(TwoDtypes(seed=rank), bucket_cap_mb=bucket_cap_mb)
    assert model.reducer.shared is not None
    assert {b.dtype for b in model.reducer.buckets} == {np.dtype(np.float32),
                                                         np.dtype(np.float64)}
    batches = global_batches(size, per_rank=3)
    opt = SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        opt.zero_grad()
        mse(model(mg.tensor(x[rank * 3:(rank + 1) * 3])), mg.tensor(y[rank * 3:(rank + 1) * 3])
            ).backward()
        opt.step()
    ref = TwoDtypes(seed=0)
    ref_opt = SGD(ref.parameters(), lr=0.1)
    for x, y in batches:
        ref_opt.zero_grad()
        mse(ref(mg.tensor(x)), mg.tensor(y)).backward()
        ref_opt.step()
    # float32 rounding of the shared output reaches the float64 branch's gradients too.
    for got, want in zip(params_of(model), params_of(ref)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert_identical_across_ranks([p.astype(np.float64) for p in params_of(model)])


@pytest.mark.mpi(min_size=2)
def test_grad_views_survive_the_rebuild_and_in_place_edits(rank, size):
    """`.grad` is a view of the rank's region; after the first iteration the buckets are laid
    out anew over the same bytes, gradients zeroed in place accumulate into the views, and a
    user's in-place edit of `.grad` (clipping) changes only that rank's copy."""
    model = DDP(MLP(seed=rank), bucket_cap_mb=300 / 2**20)
    batches = global_batches(size, steps=4)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step, batch in enumerate(batches):
        x, y = batch
        opt.zero_grad(set_to_none=step % 2 == 0)
        mse(model(mg.tensor(x[rank * 4:(rank + 1) * 4])),
            mg.tensor(y[rank * 4:(rank + 1) * 4])).backward()
        assert all(model.reducer.shared.holds(p.grad._array) for p in model.parameters())
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1e9)  # a no-op scale of 1
        assert np.isfinite(float(norm))
        opt.step()
    assert model.reducer.rebuilt
    assert_matches_oracle(model, batches)


@pytest.mark.mpi(min_size=2)
def test_join_leaves_the_joined_ranks_grad_alone(rank, size):
    """Join's shadow iterations reduce zeros through the shared buckets; the `.grad` a rank
    that ran out of data last had must not become the others' later sums."""
    model = DDP(MLP(seed=0))
    opt = SGD(model.parameters(), lr=0.1)
    with Join([model]):
        for s in range(1 + rank):
            opt.zero_grad()
            x, y = regression_data(4, seed=10 * s + rank)
            mse(model(mg.tensor(x)), mg.tensor(y)).backward()
            last = [p.grad._array.copy() for p in model.parameters()]
            opt.step()
    for p, kept in zip(model.parameters(), last):
        np.testing.assert_array_equal(p.grad._array, kept)


@pytest.mark.mpi(min_size=2)
def test_not_made_for_one_rank_per_host_or_uneven_hosts(rank, size, monkeypatch):
    """Hosts told apart by name: one rank per host has nothing to share; hosts with different
    numbers of ranks cannot pair their slices. Both reduce through MPI, and agree on it
    without a collective call that only some would make."""
    layout = [f"host-{r}" for r in range(size)] if size == 2 else \
        ["host-a"] * (size - 1) + ["host-b"]
    monkeypatch.setattr(MPI, "Get_processor_name", lambda: layout[rank])
    model = DDP(MLP(seed=rank))
    assert model.reducer.shared is None
    batches = global_batches(size)
    train(model, batches, rank)
    assert_matches_oracle(model, batches)


@pytest.mark.mpi_skip  # launches its own MPI jobs
@pytest.mark.parametrize("ranks, per_host, across", [(4, 2, "mpi"), (4, 2, "ring"),
                                                     (6, 3, "mpi")],
                         ids=["2x2", "2x2-ring", "2x3"])
def test_slices_summed_across_simulated_hosts(ranks, per_host, across):
    """Hosts of several ranks each (processor names faked on one machine): each host sums in
    its own segment and each slice crosses to the other hosts' owners of it, by the library's
    Iallreduce or mpigrad's ring; training equals one process's, bit-identical on every rank
    (fake_hosts.py)."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = job_environment(MPIGRAD_CROSS_HOST_ALLREDUCE=across)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_hosts.py")
    result = subprocess.run(["timeout", "-k", "10", "120", mpiexec, "-n", str(ranks),
                             sys.executable, script, str(per_host)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("OK rank") == ranks, result.stdout + result.stderr
