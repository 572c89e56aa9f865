"""`fully_shard`: torch's FSDP2, over MPI.

    for block in model.transformer.h:
        fully_shard(block)             # each block one unit: gathered, used, freed in turn
    fully_shard(model)                 # the root: the parameters left (embeddings, head)
    opt = AdamW(model.parameters())    # the shards
    loss = model(x, y); loss.backward(); opt.step()

Each rank keeps 1/N of every unit's parameters (`_unit.py` has the layout: flat shards, the
last ones padded, so no size has to divide by N); `_state.py` has the iteration (gather
before forward and backward with the next unit's gather issued ahead, reduce-scatter from
the backward hooks, the root). Apply it to submodules first, then to their parents: a call
manages the parameters of its module that no sharded submodule already manages.

The module's class becomes `FSDP<Class>`, a subclass of its class and of `FSDPModule` (as in
torch), which adds `reshard`, `unshard`, `set_requires_gradient_sync` and
`set_reshard_after_forward`. Differences from torch: parameters are plain 1-d Parameters
holding this rank's flat piece (torch: DTensors sharded on dim 0): `ShardParameter`s, for
which mpigrad.nn.utils.clip_grad_norm_ gives the full model's norm (as torch's does through
DTensor), and the
state-dict functions of `mpigrad.distributed.checkpoint.state_dict` give full or sharded
views. A `mesh` of two dimensions shards along the last and replicates along the first
(HSDP), as torch does.
"""
from ...nn.module import Module
from ..device_mesh import DeviceMesh
from ..process_group import _get_default_group
from . import _comm
from ._state import FSDPState
from ._unit import Unit
from .api import MixedPrecisionPolicy, OffloadPolicy

__all__ = ["fully_shard", "FSDPModule", "sharded_states"]


class FSDPModule:
    """What fully_shard adds to a module's class."""

    def reshard(self):
        """Free this module's full parameters (they are gathered again when needed)."""
        state = self._fsdp_state
        if state.unit is not None:
            state.unit.reshard()

    def unshard(self, async_op=False):
        """All-gather this module's parameters now; with `async_op` return a handle whose
        `wait()` finishes it. (Forward does this itself.)"""
        unit = self._fsdp_state.unit
        if unit is None:
            return _Done() if async_op else None
        unit.start_unshard()
        if async_op:
            return _UnshardHandle(unit)
        unit.wait_unshard()
        return None

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """With False, backward keeps accumulating unsharded gradients without reducing them
        (gradient accumulation); the next backward with True reduces their sum."""
        for state in _states(self, recurse):
            state.requires_gradient_sync = bool(requires_gradient_sync)

    def set_reshard_after_forward(self, reshard_after_forward, *, recurse=True):
        for state in _states(self, recurse):
            state.reshard_after_forward = bool(reshard_after_forward)


class _UnshardHandle:
    def __init__(self, unit):
        self._unit = unit

    def wait(self):
        self._unit.wait_unshard()


class _Done:
    def wait(self):
        return None


def _states(module, recurse):
    modules = module.modules() if recurse else [module]
    return [m._fsdp_state for m in modules if getattr(m, "_fsdp_state", None) is not None]


def sharded_states(module):
    """The FSDP states of `module` and its submodules, outermost first."""
    return _states(module, True)


_classes = {}


def fully_shard(module, *, mesh=None, reshard_after_forward=True, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(),
                ignored_params=None):
    """Shard `module`'s parameters (those no sharded submodule manages) over `mesh` (default:
    every rank, a 1-d mesh) and gather them around its forward and backward; returns the
    module, whose class now also derives from FSDPModule. `reshard_after_forward`: free the
    full parameters after forward (True) or keep them until backward (False). See the module
    docstring."""
    if isinstance(module, (list, tuple)):
        raise NotImplementedError("fully_shard of a list of modules (one unit over several) "
                                  "is not supported; shard each module")
    if shard_placement_fn is not None:
        raise NotImplementedError("fully_shard(shard_placement_fn=...): mpigrad shards every "
                                  "parameter flat; leave it None")
    if not isinstance(offload_policy, OffloadPolicy):
        raise TypeError(f"offload_policy must be an OffloadPolicy, got {offload_policy!r}")
    if isinstance(reshard_after_forward, int) and not isinstance(reshard_after_forward, bool):
        raise NotImplementedError("reshard_after_forward as an int (resharding to a smaller "
                                  "world) is not supported; pass True or False")
    shard_module(module, mesh, reshard_after_forward, mp_policy, ignored_params)
    cls = type(module)
    if not isinstance(module, FSDPModule):
        if cls not in _classes:
            _classes[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
        module.__class__ = _classes[cls]
    return module


def shard_module(module, mesh, reshard_after_forward, mp_policy, ignored_params=None):
    """Make `module` an FSDP unit (the machinery shared by fully_shard and
    FullyShardedDataParallel); returns its FSDPState."""
    if not isinstance(module, Module):
        raise TypeError(f"fully_shard wraps an mpigrad.nn.Module, got {type(module).__name__}")
    if getattr(module, "_fsdp_state", None) is not None:
        raise ValueError(f"fully_shard was already applied to this {type(module).__name__}")
    if mp_policy is not None and not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"mp_policy must be a MixedPrecisionPolicy, got {mp_policy!r}")
    shard_comm, replicate_comm = _comms_of(mesh)
    ignored = {id(p) for p in (ignored_params or ())}
    managed = set()
    for state in _states(module, True):
        if state.unit is not None:
            managed.update(id(p.shard) for p in state.unit.params)
    params = {}
    for path, sub in module.named_modules(remove_duplicate=False):
        for name, param in sub._parameters.items():
            if param is None or id(param) in managed or id(param) in ignored:
                continue
            entry = params.setdefault(id(param), (f"{path}.{name}" if path else name, [], param))
            if (sub, name) not in entry[1]:
                entry[1].append((sub, name))
    unit = None
    if params:
        policy = mp_policy or MixedPrecisionPolicy()
        unit = Unit(type(module).__name__, list(params.values()), shard_comm, replicate_comm,
                    policy.param_dtype, policy.reduce_dtype)
    return FSDPState(module, unit, shard_comm, bool(reshard_after_forward), mp_policy)


def _comms_of(mesh):
    """(ShardComm of the shard group, ShardComm of the replicate group or None)."""
    if mesh is None:
        return _comm.for_group(_get_default_group("fully_shard")), None
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"mesh must be a DeviceMesh (init_device_mesh), got {mesh!r}")
    if mesh.ndim == 1:
        return _comm.for_group(mesh.get_group(0)), None
    if mesh.ndim == 2:
        return _comm.for_group(mesh.get_group(1)), _comm.for_group(mesh.get_group(0))
    raise ValueError(f"fully_shard needs a 1-d mesh (shard) or a 2-d one (replicate, shard), "
                     f"got {mesh.ndim} dimensions")
