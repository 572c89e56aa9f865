"""DistributedDataParallel against a single-process oracle, in float64.

Each rank starts from a different random model (DDP must broadcast rank 0's), takes its slice
of a global batch, and after a few SGD-with-momentum steps must hold the parameters one
process gets from the whole batch, to 1e-10, bit-identical on every rank.
"""
import gc

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
from mpigrad.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from mpigrad.distributed.algorithms.ddp_comm_hooks.shared_memory import ENV as SHARED_MEMORY_ENV
from mpigrad.distributed.ddp.reducer import assign_buckets
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD
from mpigrad.tensor import Tensor

from ._models import MLP, mse, params_of, regression_data

PER_RANK = 4
STEPS = 3


def oracle(batches, seed=0, lr=0.1, momentum=0.9, **mlp):
    """One process, rank 0's initial model, each step on the whole global batch."""
    model = MLP(seed=seed, **mlp)
    opt = SGD(model.parameters(), lr=lr, momentum=momentum)
    for x, y in batches:
        opt.zero_grad()
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        opt.step()
    return params_of(model)


def global_batches(size, steps=STEPS, per_rank=PER_RANK):
    return [regression_data(per_rank * size, seed=100 + s) for s in range(steps)]


def local(batch, rank, per_rank=PER_RANK):
    x, y = batch
    return x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]


def train(model, batches, rank):
    """SGD with momentum over each rank's slice of `batches`."""
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    for batch in batches:
        x, y = local(batch, rank)
        opt.zero_grad()
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        opt.step()


def assert_matches_oracle(model, batches, **mlp):
    """Parameters equal the single-process run to 1e-10, and bit-identical on every rank."""
    mine = params_of(model)
    for got, want in zip(mine, oracle(batches, **mlp)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert_identical_across_ranks(mine)


def assert_identical_across_ranks(arrays):
    comm = MPI.COMM_WORLD
    flat = np.concatenate([a.ravel() for a in arrays])
    everyone = np.empty((comm.Get_size(), flat.size), flat.dtype)
    comm.Allgather(flat, everyone)
    for r in range(comm.Get_size()):
        assert np.array_equal(everyone[r], flat), f"rank {r}'s parameters differ from this rank's"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_cap_mb", [0, 300 / 2**20, 25], ids=["one-per-bucket", "300B",
                                                                     "whole-model"])
@pytest.mark.parametrize("as_view", [False, True], ids=["copy", "bucket-view"])
def test_matches_single_process_oracle(rank, size, bucket_cap_mb, as_view, reduction):
    batches = global_batches(size)
    model = DDP(MLP(seed=rank), bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=as_view)
    n_params = len(list(model.parameters()))
    in_place = [b.in_place for b in model.reducer.buckets]
    assert (model.reducer.shared is not None) == (reduction == "shared-memory")
    if bucket_cap_mb == 0:  # every parameter alone
        assert len(in_place) == n_params
    if reduction == "shared-memory":  # every bucket in the shared segment, none in place
        assert not any(in_place)
    elif bucket_cap_mb == 0:  # reduced in place
        assert all(in_place)
    elif bucket_cap_mb == 300 / 2**20:  # w1 (336 bytes) in place, the rest copied
        assert in_place.count(True) == 1 and len(in_place) > 2
    else:
        assert in_place == [False]
    train(model, batches, rank)
    assert_matches_oracle(model, batches)
    if reduction == "shared-memory":  # `.grad` left a view of this rank's shared buckets
        for p in model.parameters():
            assert model.reducer.shared.holds(p.grad._array)


@pytest.mark.mpi(min_size=2)
def test_construction_broadcasts_rank0_parameters(rank):
    model = DDP(MLP(seed=rank))
    for got, want in zip(params_of(model), params_of(MLP(seed=0))):
        assert np.array_equal(got, want)


@pytest.mark.mpi(min_size=2)
def test_grad_is_average_and_view_mode_keeps_views(rank, size, monkeypatch):
    monkeypatch.setenv(SHARED_MEMORY_ENV, "0")
    # 300 bytes: w1 (336 bytes) is reduced in place, the others are copied into buckets.
    model = DDP(MLP(seed=0), bucket_cap_mb=300 / 2**20, gradient_as_bucket_view=True)
    reducer = model.reducer
    assert [b.in_place for b in reducer.buckets].count(True) == 1
    x, y = regression_data(PER_RANK * size, seed=5)
    mse(model(mg.tensor(x[rank * PER_RANK:(rank + 1) * PER_RANK])),
        mg.tensor(y[rank * PER_RANK:(rank + 1) * PER_RANK])).backward()
    ref = MLP(seed=0)
    mse(ref(mg.tensor(x)), mg.tensor(y)).backward()
    for i, (p, q) in enumerate(zip(model.parameters(), ref.parameters())):
        np.testing.assert_allclose(p.grad._array, q.grad._array, atol=1e-12)
        bucket = reducer._bucket_of[i]
        if not bucket.in_place:
            assert np.shares_memory(p.grad._array, bucket.buffer)


def test_large_parameters_get_a_bucket_of_their_own():
    """The rule: a parameter of at least the first bucket's cap is alone in its bucket; the
    others fill buckets of their dtype up to the caps; buckets come in the order they fill."""
    params = [mg.tensor(np.zeros(n, np.float32)) for n in (10, 300, 10, 10, 300, 100)]
    # 300 float32 = 1200 bytes >= the first cap of 1000 bytes.
    assert assign_buckets(params, [5, 4, 3, 2, 1, 0], 2000, 1000) == \
        [[4], [1], [5, 3, 2, 0]]
    assert assign_buckets(params, [5, 4, 3, 2, 1, 0], 2000, 400) == \
        [[5], [4], [1], [3, 2, 0]]  # 400-byte param 5 is alone too
    assert assign_buckets(params, [0, 5, 2, 3], 2000, 450) == [[0, 5], [2, 3]]
    assert assign_buckets(params, [0, 2, 3, 5], 2000, 1000) == [[0, 2, 3, 5]]


BIG = (5, 400, 400, 3)  # w1 is 400 x 400 float64 = 1.28 MB: reduced in place by default


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("set_to_none", [True, False], ids=["grad-none", "grad-zeroed"])
@pytest.mark.parametrize("as_view", [False, True], ids=["copy", "bucket-view"])
def test_large_parameter_reduced_in_the_array_the_engine_stored(rank, size, as_view,
                                                                set_to_none):
    """The averaged `.grad` of a large parameter is the very array the engine left there (no
    copy in, no copy back), while small parameters share copied buckets; training matches
    the single-process oracle."""
    batches = global_batches(size)
    inner = MLP(sizes=BIG, seed=rank)
    stored = {}
    # Registered before DDP's hooks, so it sees `.grad` as the engine left it.
    for name, p in inner.named_parameters():
        p.register_post_accumulate_grad_hook(
            lambda p, name=name: stored.__setitem__(name, (p.grad._array, p.grad._array.ctypes.data)))
    model = DDP(inner, gradient_as_bucket_view=as_view)
    reduced = []  # the buffers the reductions ran on

    def recording_hook(state, bucket):
        reduced.append((bucket.parameters(), bucket.buffer()))
        return allreduce_hook(state, bucket)
    # A hook of the user's (not the shared-memory default) reduces large gradients in place.
    model.register_comm_hook(None, recording_hook)
    names = [name for name, _ in inner.named_parameters()]
    in_place = {names[b.members[0]] for b in model.reducer.buckets if b.in_place}
    assert in_place == {"w1"}
    assert any(len(b.members) > 1 for b in model.reducer.buckets)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    arrays = []
    for batch in batches:
        x, y = local(batch, rank)
        opt.zero_grad(set_to_none=set_to_none)
        reduced.clear()
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        array, address = stored["w1"]
        assert inner.w1.grad._array is array and inner.w1.grad._array.ctypes.data == address
        buffer = next(buf for params, buf in reduced if params == [inner.w1])
        assert buffer.ctypes.data == address and np.shares_memory(buffer, array)
        arrays.append(array)
        opt.step()
    if not set_to_none:  # accumulated in place into the same `.grad` every step
        assert all(a is arrays[0] for a in arrays)
    assert_matches_oracle(model, batches, sizes=BIG)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("as_view", [False, True], ids=["copy", "bucket-view"])
def test_unusable_grad_array_is_copied_on_that_rank_only(rank, size, as_view):
    """Rank 1's w1 gradient is not C-contiguous, rank 2's is read-only: those ranks reduce a
    private copy, the others the array itself, in one and the same reduction."""
    batches = global_batches(size)
    inner = MLP(sizes=BIG, seed=rank)

    def spoil(p):
        if rank == 1:
            p.grad = Tensor.wrap(np.asfortranarray(p.grad._array))
        elif rank == 2:
            p.grad._array.flags.writeable = False
    inner.w1.register_post_accumulate_grad_hook(spoil)
    model = DDP(inner, gradient_as_bucket_view=as_view)
    train(model, batches, rank)
    assert_matches_oracle(model, batches, sizes=BIG)


@pytest.mark.mpi(min_size=2)
def test_buckets_rebuilt_in_ready_order_same_on_every_rank(rank):
    class Scrambled(MLP):
        # Registered so that reverse registration order is not the order gradients arrive.
        def __init__(self):
            super().__init__(seed=0)
            for name in ("b1", "w0", "b2", "w2", "w1", "b0"):
                p = self._parameters.pop(name)
                self._parameters[name] = p

    model = DDP(Scrambled(), bucket_cap_mb=0)
    params = list(model.parameters())
    before = model.reducer.bucket_layout()
    assert before == [[i] for i in reversed(range(len(params)))]
    seen = []
    handles = [p.register_post_accumulate_grad_hook(lambda p, i=i: seen.append(i))
               for i, p in enumerate(params)]
    x, y = regression_data(PER_RANK, seed=rank)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    for h in handles:
        h.remove()
    assert model.reducer.rebuilt
    order0 = MPI.COMM_WORLD.bcast(seen, root=0)
    after = model.reducer.bucket_layout()
    assert after == [[i] for i in order0]
    assert after != before
    layouts = MPI.COMM_WORLD.allgather(after)
    assert all(layout == after for layout in layouts)
    # And training still agrees across ranks with the new layout.
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    assert_identical_across_ranks([p.grad._array for p in params])


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_cap_mb", [0, 25], ids=["in-place", "whole-model"])
@pytest.mark.parametrize("as_view", [False, True], ids=["copy", "bucket-view"])
def test_no_sync_accumulates_then_one_synced_step(rank, size, as_view, bucket_cap_mb):
    k, micro = 3, 2
    per_rank = (k + 1) * micro
    x, y = regression_data(per_rank * size, seed=7)
    model = DDP(MLP(seed=rank), bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=as_view)
    opt = SGD(model.parameters(), lr=0.1)
    xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]

    def micro_loss(j):
        out = model(mg.tensor(xs[j * micro:(j + 1) * micro]))
        return ((out - mg.tensor(ys[j * micro:(j + 1) * micro])) ** 2).sum() / (per_rank * 3)

    with model.no_sync():
        for j in range(k):
            micro_loss(j).backward()
    # Inside no_sync the gradients are this rank's own: they differ across ranks.
    local_grads = MPI.COMM_WORLD.allgather(next(model.parameters()).grad._array.copy())
    assert not np.allclose(local_grads[0], local_grads[1])
    micro_loss(k).backward()
    opt.step()

    ref = MLP(seed=0)
    ref_opt = SGD(ref.parameters(), lr=0.1)
    mse(ref(mg.tensor(x)), mg.tensor(y)).backward()
    ref_opt.step()
    for got, want in zip(params_of(model), params_of(ref)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert_identical_across_ranks(params_of(model))


@pytest.mark.mpi(min_size=2)
def test_buffers_broadcast_from_rank0_each_forward(rank):
    model = MLP(seed=0)
    model.register_buffer("shift", mg.tensor(np.full(3, float(rank))))
    ddp = DDP(model)
    assert np.all(model.shift._array == 0)
    model.shift._array[...] = 10 + rank
    ddp(mg.tensor(np.zeros((1, 5))))
    assert np.all(model.shift._array == 10)


@pytest.mark.mpi(min_size=2)
def test_reductions_progress_during_backward(rank):
    """The first bucket's reduction is launched before the last gradient is ready."""
    model = DDP(MLP(seed=0), bucket_cap_mb=0)
    x, y = regression_data(PER_RANK, seed=rank)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    step = model.reducer.last_step
    first, last = step["buckets"][0], step["buckets"][-1]
    assert first["launched"] < last["ready"][1]
    launches = [b["launched"] for b in step["buckets"]]
    assert launches == sorted(launches)


@pytest.mark.mpi(min_size=2)
def test_rewrapping_a_model_leaves_one_ddp_hook_per_parameter():
    model = MLP()
    for _ in range(3):
        DDP(model)
        gc.collect()
    live = DDP(model)
    assert all(len(p._post_accumulate_hooks) == 1 for p in model.parameters())
    assert live.reducer is not None


@pytest.mark.mpi(min_size=2)
def test_a_hook_that_logs_the_local_gradient_keeps_it_while_ddp_averages_in_place(rank, size):
    # 400x400 float64 is over 1 MiB: reduced in place in its own .grad.
    model = MLP(sizes=(400, 400), seed=0)
    ddp = DDP(model)
    logged = []
    model.w0.register_hook(logged.append)
    x = np.full((2, 400), rank + 1.0)
    ddp(mg.tensor(x)).sum().backward()
    np.testing.assert_array_equal(logged[0].numpy(), np.full((400, 400), 2.0 * (rank + 1)))
    mean = 2.0 * (size + 1) / 2
    np.testing.assert_allclose(model.w0.grad.numpy(), np.full((400, 400), mean))


def test_torchs_gpu_arguments_take_their_cpu_values(process_group):
    inner = MLP(seed=0)
    model = DDP(inner, device_ids=None, output_device=None)
    assert model.module is inner
    DDP(MLP(seed=0), [], None, 0, True, True, None, 25, False, False, False, True)
    DDP(MLP(seed=0), device_ids=[mg.device("cpu")], output_device="cpu")
    with pytest.raises(ValueError, match="device_ids and output_device arguments only work"):
        DDP(MLP(seed=0), device_ids=[0])
    with pytest.raises(ValueError, match="device_ids and output_device arguments only work"):
        DDP(MLP(seed=0), output_device="cuda:0")
    with pytest.raises(ValueError, match="mixed_precision=...\\) is not supported"):
        DDP(MLP(seed=0), mixed_precision=object())
