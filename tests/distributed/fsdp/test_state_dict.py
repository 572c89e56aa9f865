"""mpigrad.distributed.checkpoint.state_dict on sharded models: full state dicts (on every
rank, or on rank 0 only) hold the one-process values; sharded ones hold this rank's
FlatShards; each form loads back (sharded, full, full broadcast from rank 0) and training
continues exactly as without the round trip."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.distributed.checkpoint.state_dict import (FlatShard, StateDictOptions,
                                                       get_model_state_dict,
                                                       get_optimizer_state_dict,
                                                       get_state_dict, set_model_state_dict,
                                                       set_optimizer_state_dict,
                                                       set_state_dict)
from mpigrad.distributed.fsdp import FullyShardedDataParallel as FSDP

from ._gpt import batches, build, full_params, train
from .test_fsdp1 import BY_BLOCK
from .test_fully_shard import shard_gpt, shard_of

FULL = StateDictOptions(full_state_dict=True)


def trained(rank, size, steps=2):
    model = shard_gpt(build())
    opt, _, _ = train(model, batches(steps, 1), rank, size)
    return model, opt


def test_full_state_dicts_hold_one_process_values(rank, size):
    model, opt = trained(rank, size)
    reference = build()
    ref_opt, _, _ = train(reference, batches(2, 1), 0, 1)
    full = get_model_state_dict(model, options=FULL)
    expected = reference.state_dict()
    assert list(full) == list(expected)  # the same names, in the same order, tied ones too
    for name, value in expected.items():
        np.testing.assert_allclose(full[name]._array, value._array, rtol=0, atol=1e-12)
    optim = get_optimizer_state_dict(model, opt, options=FULL)
    ref_state = {name: ref_opt.state[p] for name, p in reference.named_parameters()}
    assert set(optim["state"]) == set(ref_state)
    for name, values in ref_state.items():
        for key, value in values.items():
            got = optim["state"][name][key]
            np.testing.assert_allclose(np.asarray(getattr(got, "data", got)),
                                       np.asarray(getattr(value, "data", value)),
                                       rtol=0, atol=1e-12, err_msg=f"{name}.{key}")
    assert optim["param_groups"][0]["params"] == [n for n, _ in reference.named_parameters()]
    on_rank0 = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                     cpu_offload=True))
    assert (on_rank0 == {}) == (rank != 0)


def test_sharded_state_dict_is_this_ranks_pieces(rank, size):
    model, opt = trained(rank, size)
    sharded, optim = get_state_dict(model, opt)
    full = full_params(model)
    for name, value in sharded.items():
        if name in full and isinstance(value, FlatShard):
            assert value.global_shape == full[name].shape
            np.testing.assert_array_equal(value.local._array, shard_of(full[name], rank, size))
            assert value.offset == min(rank * -(-full[name].size // size), full[name].size)
    assert all(isinstance(v, FlatShard) for k, v in sharded.items() if k.endswith("weight"))
    first = next(iter(optim["state"].values()))
    assert isinstance(first["exp_avg"], FlatShard)
    # The values are the model's own memory, as torch's DTensors are: a loader fills them.
    name = "h.0.attn.c_attn.weight"
    with sharded[name].local.writing() as local:
        local[...] = 7.0
    assert (model.get_parameter(name)._array == 7.0).all()
    set_model_state_dict(model, sharded)  # loading a dict onto itself changes nothing
    assert (model.get_parameter(name)._array == 7.0).all()


@pytest.mark.parametrize("form", ["sharded", "full", "full-from-rank0"])
def test_round_trip_continues_training_exactly(rank, size, form):
    model, opt = trained(rank, size)
    options = StateDictOptions(full_state_dict=form != "sharded",
                               broadcast_from_rank0=form == "full-from-rank0")
    model_sd, optim_sd = get_state_dict(model, opt, options=FULL if form != "sharded"
                                        else None)
    if form == "sharded":  # copies: the originals are the model's own memory
        model_sd = {k: FlatShard(v.local.clone(), v.global_shape, v.offset)
                    if isinstance(v, FlatShard) else v.clone() for k, v in model_sd.items()}
        optim_sd = {"state": {k: {n: FlatShard(v.local.clone(), v.global_shape, v.offset)
                                  if isinstance(v, FlatShard) else v for n, v in s.items()}
                              for k, s in optim_sd["state"].items()},
                    "param_groups": optim_sd["param_groups"]}
    if form == "full-from-rank0" and rank != 0:
        model_sd = {}
    later = batches(4, 1)[2:]
    _, expected, _ = continue_training(model, opt, later, rank, size)
    fresh = shard_gpt(build(seed=5))
    fresh_opt = mg.optim.AdamW(fresh.parameters(), lr=1e-2, weight_decay=0.1)
    set_state_dict(fresh, fresh_opt, model_state_dict=model_sd, optim_state_dict=optim_sd,
                   options=options)
    _, got, _ = continue_training(fresh, fresh_opt, later, rank, size)
    np.testing.assert_array_equal(got, expected)
    after, want = full_params(fresh), full_params(model)
    for name in want:
        np.testing.assert_array_equal(after[name], want[name], err_msg=name)


def continue_training(model, opt, data, rank, size):
    per = 6 // size
    losses = []
    for step in data:
        opt.zero_grad()
        idx, targets = step[0]
        rows = slice(rank * per, (rank + 1) * per)
        _, loss = model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return opt, losses, None


def test_fsdp1_names_drop_the_wrapper_prefix(rank, size):
    model = FSDP(build(), auto_wrap_policy=BY_BLOCK)
    keys = list(get_model_state_dict(model))
    assert keys == list(build().state_dict())
    full = get_model_state_dict(model, options=FULL)
    fresh = FSDP(build(seed=3), auto_wrap_policy=BY_BLOCK)
    set_model_state_dict(fresh, full)
    for name, value in get_model_state_dict(fresh, options=FULL).items():
        np.testing.assert_array_equal(value._array, full[name]._array)


def test_bad_state_dicts_are_errors(rank, size):
    model, opt = trained(rank, size, steps=1)
    full = get_model_state_dict(model, options=FULL)
    with pytest.raises(RuntimeError, match="Missing key"):
        set_model_state_dict(model, {k: v for k, v in full.items() if k != "ln_f.bias"})
    assert set_model_state_dict(model, {k: v for k, v in full.items() if k != "ln_f.bias"},
                                options=StateDictOptions(strict=False)).missing_keys == \
        ["ln_f.bias"]
    wrong = dict(full, **{"ln_f.weight": mg.zeros(3)})
    with pytest.raises(ValueError, match="size mismatch for ln_f.weight"):
        set_model_state_dict(model, wrong)
    sharded = get_model_state_dict(model)
    moved = dict(sharded)
    piece = sharded["wpe.weight"]
    moved["wpe.weight"] = FlatShard(piece.local, piece.global_shape, piece.offset + 1)
    with pytest.raises(ValueError, match="reshards"):
        set_model_state_dict(model, moved)
    optim = get_optimizer_state_dict(model, opt)
    optim["param_groups"][0]["params"] = list(reversed(optim["param_groups"][0]["params"]))
    with pytest.raises(ValueError, match="parameter group"):
        set_optimizer_state_dict(model, opt, optim)


def test_one_process_full_state_loads_into_any_world_size(rank, size):
    """A full state dict of an unsharded model (one process) loads into the sharded model on N
    ranks, which then trains on exactly like the one process."""
    reference = build()
    ref_opt, _, _ = train(reference, batches(2, 1), 0, 1)
    model_sd, optim_sd = get_state_dict(reference, ref_opt, options=FULL)
    model = shard_gpt(build(seed=9))
    opt = mg.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd,
                   options=FULL)
    later = batches(4, 1)[2:]
    _, got, _ = continue_training(model, opt, later, rank, size)
    _, want, _ = continue_training(reference, ref_opt, later, 0, 1)
    np.testing.assert_allclose(np.mean(all_ranks(got), axis=0), want, rtol=1e-10)
    after = full_params(model)
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(after[name], p._array, rtol=0, atol=1e-10, err_msg=name)


def all_ranks(values):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, list(values))
    return np.array(out)
