"""fully_shard (FSDP2) on N ranks, each with 1/N of every micro-batch, equals one process
with the whole batch in float64: the same losses, clipped norms and parameters after several
AdamW steps with gradient accumulation, over 1-d and 2-d (HSDP) meshes; the shards are
1/N of each parameter (padded flat pieces, sizes not divisible by N included)."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.distributed.device_mesh import init_device_mesh
from mpigrad.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from mpigrad.nn.utils import clip_grad_norm_

from ._gpt import BATCH, batches, build, full_params, train

MAX_NORM = 0.05  # below every step's norm here, so every step really clips
STEPS, MICRO = 3, 2


def oracle(data, **kwargs):
    model = build(**kwargs)
    params = list(model.parameters())
    _, losses, norms = train(model, data, 0, 1, clip_norm=MAX_NORM,
                             clip=lambda m: clip_grad_norm_(params, m))
    return {n: p._array for n, p in model.state_dict().items()}, losses, norms


def shard_gpt(model, **kwargs):
    for block in model.h:
        fully_shard(block, **kwargs)
    return fully_shard(model, **kwargs)


def assert_like_oracle(model, losses, norms, expected, rank, world):
    want, want_losses, want_norms = expected
    per = BATCH // world
    assert len(losses) == len(want_losses)
    # Each rank's loss is on its rows: their mean over ranks is the whole batch's loss.
    mean_losses = np.array(dist_all_gather(np.array(losses))).mean(0)
    np.testing.assert_allclose(mean_losses, want_losses, rtol=1e-10, atol=1e-12)
    assert min(want_norms) > MAX_NORM
    np.testing.assert_allclose(norms, want_norms, rtol=1e-10)
    got = full_params(model)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-10, err_msg=name)
    assert per * world == BATCH


def dist_all_gather(array):
    out = [np.empty_like(array) for _ in range(dist.get_world_size())]
    dist.all_gather(out, array)
    return out


@pytest.mark.parametrize("reshard_after_forward", [True, False])
def test_fully_shard_gpt_equals_one_process(rank, size, reshard_after_forward):
    data = batches(STEPS, MICRO)
    model = shard_gpt(build(), reshard_after_forward=reshard_after_forward)
    assert isinstance(model, FSDPModule) and isinstance(model.h[0], FSDPModule)
    _, losses, norms = train(model, data, rank, size, clip_norm=MAX_NORM,
                             clip=lambda m: clip_grad_norm_(model.parameters(), m),
                             sync=model.set_requires_gradient_sync)
    assert_like_oracle(model, losses, norms, oracle(data), rank, size)


@pytest.mark.parametrize("shape", ["replicate", "shard"])
def test_hsdp_two_dimensional_mesh_equals_one_process(rank, size, shape):
    """(size, 1): every rank holds everything, gradients all-reduced; (1, size): sharded."""
    mesh = init_device_mesh("cpu", (size, 1) if shape == "replicate" else (1, size),
                            mesh_dim_names=("replicate", "shard"))
    data = batches(2, MICRO)
    model = shard_gpt(build(), mesh=mesh)
    _, losses, norms = train(model, data, rank, size, clip_norm=MAX_NORM,
                             clip=lambda m: clip_grad_norm_(model.parameters(), m),
                             sync=model.set_requires_gradient_sync)
    assert_like_oracle(model, losses, norms, oracle(data), rank, size)


def test_shards_are_one_nth_of_each_parameter(rank, size):
    full = build()
    sizes = {name: p.numel() for name, p in full.named_parameters()}
    assert any(n % 2 for n in sizes.values()) and any(n % 3 for n in sizes.values())
    model = shard_gpt(build())
    for name, shard in model.named_parameters():
        np.testing.assert_array_equal(shard._array, shard_of(full.get_parameter(name)._array,
                                                           rank, size))
    got = full_params(model)
    for name, p in full.named_parameters():
        np.testing.assert_array_equal(got[name], p._array)


class Tiny(nn.Module):
    """A 1-element bias: at 2 and 3 ranks some ranks hold empty shards."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 5)
        self.b = nn.Linear(5, 1)

    def forward(self, x):
        return self.b(mg.tanh(self.a(x)))


def test_empty_shards_train_like_one_process(rank, size):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((6, 3)), rng.standard_normal((6, 1))

    def run(model, rows):
        opt = mg.optim.AdamW(model.parameters(), lr=0.05)
        for _ in range(3):
            opt.zero_grad()
            ((model(mg.tensor(x[rows])) - mg.tensor(y[rows])) ** 2).mean().backward()
            opt.step()

    mg.manual_seed(1)
    ref = Tiny().double()
    run(ref, slice(None))
    mg.manual_seed(1)
    model = Tiny().double()
    fully_shard(model.a)
    fully_shard(model.b)
    fully_shard(model)
    per = 6 // size
    run(model, slice(rank * per, (rank + 1) * per))
    assert model.b.bias.shape == ((1,) if rank == 0 else (0,))
    got = full_params(model)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(got[name], p._array, rtol=0, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("param_dtype, rtol, atol", [("float32", 1e-4, 1e-6),
                                                     ("bfloat16", 5e-2, 2e-3)])
def test_mixed_precision_gathers_in_param_dtype(rank, size, param_dtype, rtol, atol):
    """float32 (or bfloat16) compute and float32 reduction over float64 shards: gradients
    close to the float64 run's, and the shards, their gradients and the optimizer's state
    stay float64."""
    data = batches(1, 1)
    policy = MixedPrecisionPolicy(param_dtype=getattr(mg, param_dtype), reduce_dtype=mg.float32)
    model = shard_gpt(build(), mp_policy=policy)
    opt, _, _ = train(model, data, rank, size)
    reference = build()
    train(reference, data, 0, 1)
    grads = {name: p.grad._array for name, p in reference.named_parameters()}
    for name, shard in model.named_parameters():
        assert shard.dtype == np.float64 and shard.grad.dtype == np.float64
        np.testing.assert_allclose(shard.grad._array, shard_of(grads[name], rank, size),
                                   rtol=rtol, atol=atol, err_msg=name)
    assert all(v.dtype == np.float64 for s in opt.state.values() for v in s.values()
               if isinstance(v, mg.Tensor))


def test_bfloat16_gradients_need_a_float32_reduce_dtype(rank, size):
    """MPI has no bfloat16 type to sum: a bfloat16 reduce_dtype (param_dtype's by default)
    is refused on every rank with the fix, before anything is gathered."""
    with pytest.raises(TypeError, match="reduce_dtype=float32"):
        shard_gpt(build(), mp_policy=MixedPrecisionPolicy(param_dtype=mg.bfloat16))


def shard_of(array, rank, size):
    """Rank `rank`'s flat piece of `array` in FSDP's layout."""
    flat = array.reshape(-1)
    chunk = -(-flat.size // size)
    return flat[rank * chunk:(rank + 1) * chunk]


def test_unshard_and_reshard_by_hand(rank, size):
    model = shard_gpt(build())
    reference = build()
    block = model.h[0]
    block.unshard()
    full = {q.fqn: q.full for q in block._fsdp_state.unit.params}
    for name, p in reference.h[0].named_parameters():
        np.testing.assert_array_equal(full[name]._array, p._array)
    block.reshard()
    assert all(q.full._array.strides == (0,) * q.full.ndim or q.full.ndim == 0
               for q in block._fsdp_state.unit.params)


@pytest.mark.parametrize("norm_type", [1.0, float("inf")])
def test_other_norms_over_shards_equal_one_process(rank, size, norm_type):
    data = batches(1, 1)
    model = shard_gpt(build())
    _, _, norms = train(model, data, rank, size, clip_norm=1e-3,
                        clip=lambda m: clip_grad_norm_(model.parameters(), m, norm_type))
    reference = build()
    params = list(reference.parameters())
    _, _, want = train(reference, data, 0, 1, clip_norm=1e-3,
                       clip=lambda m: clip_grad_norm_(params, m, norm_type))
    np.testing.assert_allclose(norms, want, rtol=1e-12)


def test_training_goes_on_after_evaluation_and_a_failed_backward(rank, size):
    """A no_grad forward, a forward whose loss is dropped, and a backward that raises on
    every rank (its batch then skipped) leave the model training like one process that ran
    only the other batches."""
    data = batches(4, 1)
    kept = [data[0], data[2], data[3]]
    model = shard_gpt(build())
    opt = mg.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    per = BATCH // size
    rows = slice(rank * per, (rank + 1) * per)

    def fail(module, grad_output):
        raise ValueError("a bad batch")

    for k, ((idx, targets),) in enumerate(data):
        opt.zero_grad()
        _, loss = model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
        if k == 1:
            handle = model.h[0].register_full_backward_pre_hook(fail)
            _, loss = model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
            with pytest.raises(ValueError, match="a bad batch"):
                loss.backward()
            handle.remove()
            assert all(p.grad is None for p in model.parameters())
            continue
        loss.backward()
        opt.step()
        with mg.no_grad():
            model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
    reference = build()
    train(reference, kept, 0, 1)
    got = full_params(model)
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(got[name], p._array, rtol=0, atol=1e-10, err_msg=name)


def test_next_units_gather_and_reduction_overlap_compute(rank, size):
    """From the second step on, block 1's all-gather is issued before block 0 computes its
    forward; block 1's reduce-scatter is issued before block 0's backward computes (MPI may
    finish it at once: what matters is that it does not wait for the end of backward)."""
    model = shard_gpt(build())
    seen = []

    def forward_hook(module, args, output):
        seen.append(("forward", model.h[1]._fsdp_state.unit._gather is not None))
        output.register_hook(lambda grad: seen.append(
            ("backward", model._fsdp_state.root.reduce_order[:model._fsdp_state.root.next_reduce]
             == [model.h[1]._fsdp_state])))

    model.h[0].register_forward_hook(forward_hook)
    train(model, batches(2, 1), rank, size)
    assert seen[2:] == [("forward", True), ("backward", True)], seen


def test_frozen_block_trains_like_one_process(rank, size):
    """A unit with no trainable parameter is still gathered for its backward (the gradient
    flows through it) and reduces nothing; the others train as in one process."""
    data = batches(2, 1)

    def frozen():
        model = build()
        model.h[0].requires_grad_(False)
        return model

    model = shard_gpt(frozen())
    train(model, data, rank, size)
    reference = frozen()
    train(reference, data, 0, 1)
    got = full_params(model)
    assert all(p.grad is None for p in model.h[0].parameters())
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(got[name], p._array, rtol=0, atol=1e-10, err_msg=name)
