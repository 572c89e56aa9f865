"""FullyShardedDataParallel (FSDP1) with each sharding strategy and both auto-wrap policies:
N ranks, each with 1/N of every micro-batch, equal one process with the whole batch in
float64 over several AdamW steps with no_sync accumulation and the wrapper's
clip_grad_norm_."""
import contextlib
import functools

import numpy as np
import pytest

import mpigrad as mg

from mpigrad.distributed.device_mesh import init_device_mesh
from mpigrad.distributed.fsdp import FullyShardedDataParallel as FSDP
from mpigrad.distributed.fsdp import ShardingStrategy
from mpigrad.distributed.fsdp.wrap import (size_based_auto_wrap_policy,
                                           transformer_auto_wrap_policy)

from ._gpt import Block, batches, build, full_params
from .test_fully_shard import MAX_NORM, MICRO, STEPS, assert_like_oracle, oracle

BY_BLOCK = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
BY_SIZE = functools.partial(size_based_auto_wrap_policy, min_num_params=100)


def train_fsdp1(model, data, rank, size):
    """train() of _gpt, with FSDP1's no_sync() around every micro-batch but the last."""
    opt = mg.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    per = 6 // size
    losses, norms = [], []
    for step in data:
        opt.zero_grad()
        for k, (idx, targets) in enumerate(step):
            rows = slice(rank * per, (rank + 1) * per)
            context = model.no_sync() if k < len(step) - 1 else contextlib.nullcontext()
            with context:
                _, loss = model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
                (loss / len(step)).backward()
            losses.append(loss.item())
        norms.append(float(model.clip_grad_norm_(MAX_NORM).item()))
        opt.step()
    return losses, norms


@pytest.mark.parametrize("strategy", list(ShardingStrategy), ids=lambda s: s.name)
def test_each_strategy_equals_one_process(rank, size, strategy):
    data = batches(STEPS, MICRO)
    model = FSDP(build(), sharding_strategy=strategy, auto_wrap_policy=BY_BLOCK)
    assert len(FSDP.fsdp_modules(model)) == 3  # two blocks and the root
    losses, norms = train_fsdp1(model, data, rank, size)
    assert_like_oracle(model, losses, norms, oracle(data), rank, size)


def test_size_policy_and_hybrid_mesh_equal_one_process(rank, size):
    """HYBRID_SHARD over an explicit (size, 1) mesh (replicas only), units chosen by size."""
    data = batches(2, MICRO)
    mesh = init_device_mesh("cpu", (size, 1), mesh_dim_names=("replicate", "shard"))
    model = FSDP(build(), sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                 auto_wrap_policy=BY_SIZE, device_mesh=mesh)
    wrapped = FSDP.fsdp_modules(model)
    assert len(wrapped) > 3 and all(m.__class__.__name__ != "ModuleList" for m in wrapped)
    losses, norms = train_fsdp1(model, data, rank, size)
    assert_like_oracle(model, losses, norms, oracle(data), rank, size)


def test_no_shard_keeps_whole_parameters(rank, size):
    model = FSDP(build(), sharding_strategy=ShardingStrategy.NO_SHARD,
                 auto_wrap_policy=BY_BLOCK)
    reference = build()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        np.testing.assert_array_equal(p._array, q._array.reshape(-1))


def test_bad_arguments_are_errors(rank, size):
    with pytest.raises(TypeError, match="ShardingStrategy"):
        FSDP(build(), sharding_strategy="FULL_SHARD")
    with pytest.raises(ValueError, match="CPU only"):
        FSDP(build(), device_id=0)
    with pytest.raises(NotImplementedError, match="meta device"):
        FSDP(build(), param_init_fn=lambda m: None)


def test_sync_module_states_takes_rank0s_values(rank, size):
    model = FSDP(build(seed=rank), auto_wrap_policy=BY_BLOCK, sync_module_states=True)
    got = full_params(model)
    for name, p in build(seed=0).named_parameters():
        np.testing.assert_array_equal(got[name], p._array, err_msg=name)


def test_summon_full_params_shows_and_writes_back_full_values(rank, size):
    model = FSDP(build(), auto_wrap_policy=BY_BLOCK)
    reference = build()
    with FSDP.summon_full_params(model):
        params = dict(model.named_parameters())
        for name, p in reference.named_parameters():
            np.testing.assert_array_equal(params["_fsdp_wrapped_module." + name]._array, p._array)
        with mg.no_grad():
            params["_fsdp_wrapped_module.ln_f.bias"].add_(1.0)
    assert model.module.ln_f.bias.ndim == 1
    np.testing.assert_array_equal(full_params(model)["ln_f.bias"],
                                  reference.ln_f.bias._array + 1.0)
