"""State dicts of sharded models and their optimizers: torch.distributed.checkpoint.state_dict.

    model_sd, optim_sd = get_state_dict(model, opt)                   # sharded (the default)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)

Keys are the parameters' fully qualified names in the unwrapped model (FSDP1's
`_fsdp_wrapped_module.` and DistributedDataParallel's `module.` are dropped, as torch does);
the optimizer's state is keyed by the same names ({"state": {fqn: {...}}, "param_groups":
[{..., "params": [fqn, ...]}]}). Functions that gather (full state dicts) or broadcast are
collective: every rank calls them. Models that are not sharded work too (every value is
then a plain tensor).

The forms (the contract checkpoint.save/load rely on):

- Full (`full_state_dict=True`): every value is a plain Tensor with the parameter's real
  shape, the whole value gathered; on every rank, or with `cpu_offload=True` on rank 0 only
  (the others get an empty dict), as torch does. Setting one: every rank passes the full
  values, or with `broadcast_from_rank0=True` rank 0 does and the others may pass {}.

- Sharded (the default): a sharded parameter, and each optimizer state of its shape
  (exp_avg, ...), is a `FlatShard`: `local`, a 1-d Tensor holding the elements
  [offset, offset + local.numel()) of the flattened (row-major) global tensor, `global_shape`
  and `offset`. The ranks of a shard group hold disjoint pieces that cover the tensor; ranks
  that replicate it (HSDP's replicate dimension) hold equal pieces at equal offsets, so a
  writer keeps one of each (offset, length). `local` is the model's (the optimizer's)
  own memory, as torch's DTensors are, so a loader that fills each FlatShard's `local` in
  place (`with shard.local.writing() as array:`) with the elements it names, from whatever
  layout was saved, then calls
  set_model_state_dict / set_optimizer_state_dict, reshards to any world size. Every other
  value (buffers, parameters no unit shards, the optimizer's `step`) is a plain Tensor,
  the same on every rank: a writer keeps one copy. A name may be a FlatShard on one side and
  a plain Tensor on the other (a sharded model saved, an unsharded one loading, or the
  reverse): a plain Tensor is the FlatShard of offset 0 covering the whole tensor.
"""
import dataclasses

import numpy as np

from ...autograd import grad_mode
from ...nn.module import IncompatibleKeys
from ...tensor import Tensor
from ..collectives import broadcast
from ..ddp.wrapper import DistributedDataParallel
from ..fsdp.fully_shard import sharded_states
from ..fsdp.fully_sharded_data_parallel import WRAPPED
from ..process_group import get_rank
# DCP's own, so these state dicts are what checkpoint.save and load store.
from .flat_shard import FlatShard

__all__ = ["StateDictOptions", "FlatShard", "get_model_state_dict", "set_model_state_dict",
           "get_optimizer_state_dict", "set_optimizer_state_dict", "get_state_dict",
           "set_state_dict"]


@dataclasses.dataclass
class StateDictOptions:
    """torch's options. full_state_dict: gathered values (else sharded FlatShards);
    cpu_offload: with full_state_dict, only rank 0 keeps the values (everything is in CPU
    memory already); ignore_frozen_params: leave out parameters that need no gradient;
    strict: setting a model state dict with missing or unexpected keys raises;
    broadcast_from_rank0: setting a full state dict, take rank 0's values.
    keep_submodule_prefixes, flatten_optimizer_state_dict and dsd_fqn_modifiers are
    accepted; the latter two change nothing."""
    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"


class _Layout:
    """The model's parameters as the state dicts name them, and which are shards."""

    def __init__(self, model):
        self.model = model
        self.managed = {}      # id(shard parameter) -> (ManagedParam, Unit)
        for state in sharded_states(model):
            if state.unit is not None:
                for p in state.unit.params:
                    self.managed[id(p.shard)] = (p, state.unit)
        self.tensors = {_clean(k, model): v
                        for k, v in model.state_dict(keep_vars=True).items()}
        self.fqn_of = {}
        for name, p in model.named_parameters():
            self.fqn_of.setdefault(id(p), _clean(name, model))
        self.units = [s.unit for s in sharded_states(model) if s.unit is not None]

    def keys(self, options, submodules=None):
        keys = list(self.tensors)
        if options.ignore_frozen_params:
            keys = [k for k in keys if getattr(self.tensors[k], "requires_grad", True)
                    or id(self.tensors[k]) not in self.fqn_of]
        if submodules:
            prefixes = [name + "." for name, m in self.model.named_modules()
                        if any(m is s for s in submodules)]
            keys = [k for k in keys if any(k.startswith(_clean(p, self.model))
                                           for p in prefixes)]
        return keys

    def full_values(self, pieces_of, what):
        """{id(shard): full array} for every shard `pieces_of(shard)` gives an array for,
        gathered unit by unit (collective); `pieces_of` returns None for a shard to skip."""
        fulls = {}
        for unit in self.units:
            pieces = [pieces_of(p.shard) for p in unit.params]
            present = [piece is not None for piece in pieces]
            dtype = next((piece.dtype for piece in pieces if piece is not None), unit.dtype)
            filled = [piece if piece is not None else np.zeros(p.length, dtype)
                      for p, piece in zip(unit.params, pieces)]
            for p, full, keep in zip(unit.params, unit.gather_full(filled, dtype, what),
                                     present):
                if keep:
                    fulls[id(p.shard)] = full
        return fulls


def _clean(fqn, model):
    fqn = fqn.replace(WRAPPED + ".", "")
    if isinstance(model, DistributedDataParallel) and fqn.startswith("module."):
        fqn = fqn[len("module."):]
    return fqn


def _options(options):
    if options is None:
        return StateDictOptions()
    if not isinstance(options, StateDictOptions):
        raise TypeError(f"options must be a StateDictOptions, got {options!r}")
    return options


def _as_array(value, key):
    if isinstance(value, FlatShard):
        return value
    if isinstance(value, Tensor):
        return value._array
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"state dict value for '{key}' must be a Tensor, an ndarray or a "
                    f"FlatShard, got {type(value).__name__}")


# ---------------------------------------------------------------------- model
def get_model_state_dict(model, *, submodules=None, options=None):
    """The model's state dict, sharded or full (see the module docstring). Collective with
    full_state_dict."""
    options = _options(options)
    layout = _Layout(model)
    keys = layout.keys(options, submodules)
    if not options.full_state_dict:
        result = {}
        for key in keys:
            t = layout.tensors[key]
            entry = layout.managed.get(id(t))
            result[key] = FlatShard(t.detach(), entry[0].shape, entry[0].offset) \
                if entry is not None else t.detach()
        return result
    fulls = layout.full_values(lambda shard: shard._array, "gathering the full state dict")
    if options.cpu_offload and get_rank() != 0:
        return {}
    return {key: Tensor.wrap(fulls[id(layout.tensors[key])])
            if id(layout.tensors[key]) in fulls else layout.tensors[key].detach()
            for key in keys}


def set_model_state_dict(model, model_state_dict, *, options=None):
    """Load `model_state_dict` (full or sharded, as get_model_state_dict gives) into the
    model; returns (missing_keys, unexpected_keys). A FlatShard must name this rank's own
    piece (a loader reshards into the FlatShards get_model_state_dict returns)."""
    options = _options(options)
    layout = _Layout(model)
    given = dict(model_state_dict)
    if options.broadcast_from_rank0:
        given = _broadcast_full(layout, given)
    own = layout.keys(options)
    missing = [k for k in own if k not in given]
    unexpected = [k for k in given if k not in layout.tensors]
    if options.strict and (missing or unexpected):
        raise RuntimeError(f"Error(s) in loading state_dict for {type(model).__name__}:\n\t"
                           + (f"Missing key(s) in state_dict: {', '.join(missing)}\n\t"
                              if missing else "")
                           + (f"Unexpected key(s) in state_dict: {', '.join(unexpected)}"
                              if unexpected else ""))
    with grad_mode.no_grad():
        for key in own:
            if key not in given:
                continue
            target = layout.tensors[key]
            entry = layout.managed.get(id(target))
            value = _local_value(_as_array(given[key], key), entry, target, key)
            with target.writing() as array:
                np.copyto(array, value.reshape(array.shape))
    return IncompatibleKeys(missing, unexpected)


def _local_value(value, entry, target, key):
    """The array to copy into `target` (a shard when `entry` is its ManagedParam)."""
    if entry is None:
        if isinstance(value, FlatShard):
            raise ValueError(f"'{key}' is not sharded in this model but the state dict holds "
                             f"a FlatShard of it")
        if tuple(value.shape) != tuple(target.shape):
            raise ValueError(f"size mismatch for {key}: the state dict has shape "
                             f"{tuple(value.shape)}, the model has {tuple(target.shape)}")
        return value
    managed = entry[0]
    if isinstance(value, FlatShard):
        if (tuple(value.global_shape) != managed.shape or value.offset != managed.offset
                or value.length != managed.length):
            raise ValueError(
                f"'{key}': the FlatShard holds elements [{value.offset}, "
                f"{value.offset + value.length}) of a tensor of shape "
                f"{tuple(value.global_shape)}, but this rank's shard is [{managed.offset}, "
                f"{managed.offset + managed.length}) of shape {managed.shape}; load it "
                f"through mpigrad.distributed.checkpoint.load into this rank's "
                f"get_model_state_dict(), which reshards")
        return value.local._array
    if tuple(value.shape) != managed.shape:
        raise ValueError(f"size mismatch for {key}: the state dict has shape "
                         f"{tuple(value.shape)}, the model has {managed.shape}")
    return np.ascontiguousarray(value).reshape(-1)[managed.offset:managed.offset +
                                                  managed.length]


def _broadcast_full(layout, given):
    """Rank 0's full values, on every rank (collective; shapes from the model)."""
    result = {}
    for key, target in layout.tensors.items():
        entry = layout.managed.get(id(target))
        shape = entry[0].shape if entry is not None else tuple(target.shape)
        dtype = target._array.dtype
        have = np.array([key in given], np.int64)
        broadcast(have, src=0)
        if not have[0]:
            continue
        array = np.ascontiguousarray(_as_array(given[key], key), dtype) if get_rank() == 0 \
            else np.empty(shape, dtype)
        broadcast(array, src=0)
        result[key] = array
    return result


# ---------------------------------------------------------------------- optimizer
def _optimizers(optimizers):
    return list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    """The optimizers' state keyed by parameter name, sharded or full (module docstring).
    Collective with full_state_dict."""
    options = _options(options)
    layout = _Layout(model)
    state, groups = {}, []
    shard_states = {}   # (id(shard), state key) -> the state tensor, for full gathering
    for opt in _optimizers(optimizers):
        for group in opt.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [_fqn(layout, p) for p in group["params"]]
            groups.append(packed)
            for p in group["params"]:
                values = opt.state.get(p)
                if not values:
                    continue
                entry = layout.managed.get(id(p))
                out = {}
                for name, value in values.items():
                    if entry is not None and isinstance(value, Tensor) and \
                            value.shape == p.shape and value.ndim == 1:
                        out[name] = FlatShard(value, entry[0].shape, entry[0].offset)
                        shard_states[(id(p), name)] = value
                    else:
                        out[name] = value
                state[_fqn(layout, p)] = out
    if options.full_state_dict:
        names = sorted({name for _, name in shard_states})
        for name in names:
            fulls = layout.full_values(
                lambda shard: shard_states[(id(shard), name)]._array
                if (id(shard), name) in shard_states else None,
                f"gathering the optimizer's '{name}'")
            for shard_id, full in fulls.items():
                state[layout.fqn_of[shard_id]][name] = Tensor.wrap(full)
        if options.cpu_offload and get_rank() != 0:
            return {}
    return {"state": state, "param_groups": groups}


def _fqn(layout, param):
    try:
        return layout.fqn_of[id(param)]
    except KeyError:
        raise ValueError(f"the optimizer holds a parameter of shape {tuple(param.shape)} that "
                         f"is not one of the model's") from None


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Load an optimizer state dict keyed by parameter name (full or sharded) into the
    optimizers."""
    options = _options(options)
    layout = _Layout(model)
    saved_state = optim_state_dict["state"]
    saved_groups = list(optim_state_dict["param_groups"])
    for opt in _optimizers(optimizers):
        mine, index, state = saved_groups[:len(opt.param_groups)], {}, {}
        saved_groups = saved_groups[len(opt.param_groups):]
        groups = []
        for group, saved in zip(opt.param_groups, mine):
            fqns = [_fqn(layout, p) for p in group["params"]]
            if list(saved["params"]) != fqns:
                raise ValueError(f"the saved parameter group names {list(saved['params'])[:4]}"
                                 f"... but this optimizer's group holds {fqns[:4]}...")
            groups.append({**{k: v for k, v in saved.items() if k != "params"},
                           "params": list(range(len(index), len(index) + len(fqns)))})
            for p, fqn in zip(group["params"], fqns):
                i = index[fqn] = len(index)
                if fqn in saved_state:
                    entry = layout.managed.get(id(p))
                    state[i] = {name: _optimizer_value(value, entry, p, f"{fqn}.{name}")
                                for name, value in saved_state[fqn].items()}
        opt.load_state_dict({"state": state, "param_groups": groups})


def _optimizer_value(value, entry, param, key):
    if isinstance(value, FlatShard) or (entry is not None and isinstance(value, Tensor)
                                        and tuple(value.shape) == entry[0].shape
                                        and tuple(value.shape) != tuple(param.shape)):
        return Tensor.wrap(np.array(_local_value(_as_array(value, key), entry, param, key)))
    return value


# ---------------------------------------------------------------------- both
def get_state_dict(model, optimizers, *, submodules=None, options=None):
    """(model state dict, optimizer state dict)."""
    return (get_model_state_dict(model, submodules=submodules, options=options),
            get_optimizer_state_dict(model, optimizers, submodules=submodules,
                                     options=options))


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    """Load both; returns the model's (missing_keys, unexpected_keys)."""
    keys = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return keys
