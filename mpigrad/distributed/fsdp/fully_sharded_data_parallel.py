"""FullyShardedDataParallel: torch's FSDP1 wrapper, on fully_shard's machinery.

    model = FullyShardedDataParallel(GPT(...), auto_wrap_policy=functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={Block}),
        sharding_strategy=ShardingStrategy.FULL_SHARD)

The policy picks submodules (children first) that become units of their own; the wrapper is
the root unit, over the parameters left. Each strategy is a placement on a mesh:

  FULL_SHARD      shard over the group; full parameters freed after forward
  SHARD_GRAD_OP   the same, kept from forward to backward
  NO_SHARD        a (world, 1) mesh: shard groups of one rank, gradients all-reduced over the
                  replicate dimension (every rank holds every parameter)
  HYBRID_SHARD    `device_mesh` (2-d: replicate, shard) if given, else the ranks of each host
                  shard and hosts replicate (a (hosts, ranks per host) mesh)

Differences from torch: the chosen submodules keep their class and place (torch swaps in
FSDP instances, whose names then carry `_fsdp_wrapped_module.`; here only the wrapper's own
attribute does, and the state-dict functions drop it, as torch's do); parameters are exposed
as their flat shards whatever `use_orig_params` says. `cpu_offload`, `backward_prefetch`,
`forward_prefetch` and `limit_all_gathers` are accepted and change nothing (everything is in
CPU memory; the next unit's gather is always issued ahead).
"""
import contextlib

from ...nn.module import Module
from ...nn.utils.clip_grad import clip_grad_norm_
from ..collectives import broadcast
from ..device_mesh import DeviceMesh, init_device_mesh
from ..process_group import _get_default_group, get_local_world_size
from .api import MixedPrecision, MixedPrecisionPolicy, ShardingStrategy
from .fully_shard import shard_module, sharded_states
from .wrap import apply_auto_wrap

__all__ = ["FullyShardedDataParallel"]

WRAPPED = "_fsdp_wrapped_module"

_RESHARD = {ShardingStrategy.FULL_SHARD: True, ShardingStrategy.SHARD_GRAD_OP: False,
            ShardingStrategy.NO_SHARD: False, ShardingStrategy.HYBRID_SHARD: True,
            ShardingStrategy._HYBRID_SHARD_ZERO2: False}


class FullyShardedDataParallel(Module):
    """FSDP1 (see the module docstring); torch's arguments in torch's order."""

    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None,
                 auto_wrap_policy=None, backward_prefetch=None, mixed_precision=None,
                 ignored_modules=None, param_init_fn=None, device_id=None,
                 sync_module_states=False, forward_prefetch=False, limit_all_gathers=True,
                 use_orig_params=False, ignored_states=None, device_mesh=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"FullyShardedDataParallel wraps an mpigrad.nn.Module, got "
                            f"{type(module).__name__}")
        strategy = sharding_strategy if sharding_strategy is not None \
            else ShardingStrategy.FULL_SHARD
        if not isinstance(strategy, ShardingStrategy):
            raise TypeError(f"sharding_strategy must be a ShardingStrategy, got {strategy!r}")
        if param_init_fn is not None:
            raise NotImplementedError("FullyShardedDataParallel(param_init_fn=...): mpigrad has "
                                      "no meta device; build the module with real parameters")
        if device_id is not None and str(device_id) != "cpu":
            raise ValueError(f"FullyShardedDataParallel(device_id={device_id!r}): mpigrad runs "
                             f"on the CPU only; pass None")
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
            raise TypeError(f"mixed_precision must be a MixedPrecision, got {mixed_precision!r}")
        self.sharding_strategy = strategy
        mesh = _mesh_for(strategy, process_group, device_mesh)
        if sync_module_states:
            _broadcast_from_rank0(module)
        policy = None
        if mixed_precision is not None:
            policy = MixedPrecisionPolicy(mixed_precision.param_dtype,
                                          mixed_precision.reduce_dtype)
            if mixed_precision.buffer_dtype is not None:
                for buffer in module.buffers():
                    if buffer.is_floating_point():
                        buffer._array = buffer._array.astype(mixed_precision.buffer_dtype)
        ignored = [p for m in (ignored_modules or ()) for p in m.parameters()]
        ignored += [p for p in (ignored_states or ()) if not isinstance(p, Module)]
        ignored += [p for m in (ignored_states or ()) if isinstance(m, Module)
                    for p in m.parameters()]
        reshard = _RESHARD[strategy]
        self._fsdp_wrapped_module = module

        shards = set()  # ids of the shards made so far: the policies count what is left

        def wrap(sub):
            state = shard_module(sub, mesh, reshard, policy, ignored)
            if state.unit is not None:
                shards.update(id(p.shard) for p in state.unit.params)

        if auto_wrap_policy is not None:
            apply_auto_wrap(module, auto_wrap_policy, wrap, lambda p: id(p) in shards)
        root_policy = policy
        if mixed_precision is not None:  # FSDP1 casts the root's inputs, and only those
            root_policy = MixedPrecisionPolicy(policy.param_dtype, policy.reduce_dtype,
                                               cast_forward_inputs=True)
            for state in sharded_states(module):
                state.mp_policy = MixedPrecisionPolicy(policy.param_dtype, policy.reduce_dtype,
                                                       cast_forward_inputs=False)
        shard_module(self, mesh, reshard, root_policy, ignored)

    @property
    def module(self):
        return self._fsdp_wrapped_module

    def forward(self, *args, **kwargs):
        return self._fsdp_wrapped_module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward accumulates unsharded gradients without reducing them; the first
        backward after it reduces their sum."""
        states = sharded_states(self)
        previous = [s.requires_gradient_sync for s in states]
        for s in states:
            s.requires_gradient_sync = False
        try:
            yield
        finally:
            for s, value in zip(states, previous):
                s.requires_gradient_sync = value

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clip the sharded gradients by their global norm (collective); returns the norm."""
        return clip_grad_norm_(self.parameters(), max_norm, norm_type)

    @staticmethod
    @contextlib.contextmanager
    def summon_full_params(module, recurse=True, writeback=True, rank0_only=False,
                           offload_to_cpu=False, with_grads=False):
        """Inside, `module`'s sharded modules hold their full parameters (gathered:
        collective); with `writeback`, changes made to them go back into the shards on
        leaving. `offload_to_cpu` changes nothing (all is in CPU memory)."""
        if rank0_only or with_grads:
            raise NotImplementedError("summon_full_params(rank0_only=True or with_grads=True) "
                                      "is not supported")
        units = [s.unit for s in (sharded_states(module) if recurse
                                  else sharded_states(module)[:1]) if s.unit is not None]
        for unit in units:
            unit.unshard()
            unit.use_full()
        try:
            yield
        finally:
            for unit in units:
                if writeback:
                    unit.write_back()
                unit.use_shards()
                unit.reshard()

    @staticmethod
    def fsdp_modules(module, root_only=False):
        """The sharded modules in `module` (with root_only, the outermost)."""
        states = sharded_states(module)
        return [s.module for s in (states[:1] if root_only else states)]


def _mesh_for(strategy, process_group, device_mesh):
    """The mesh a strategy places the units on (None: the default group)."""
    if isinstance(process_group, tuple):
        raise NotImplementedError("HYBRID_SHARD with a (intra, inter) process_group pair: pass "
                                  "device_mesh=init_device_mesh('cpu', (replicas, shards)) "
                                  "instead")
    hybrid = strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)
    if device_mesh is not None:
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"device_mesh must be a DeviceMesh, got {device_mesh!r}")
        if hybrid != (device_mesh.ndim == 2):
            raise ValueError(f"{strategy.name} needs a {'2' if hybrid else '1'}-d device_mesh, "
                             f"got {device_mesh.ndim} dimensions")
        return device_mesh
    world = _get_default_group("FullyShardedDataParallel").size()
    if strategy is ShardingStrategy.NO_SHARD:
        if process_group is not None and process_group.size() != world:
            raise NotImplementedError("NO_SHARD over a subgroup: pass a (replicas, 1) "
                                      "device_mesh")
        return init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
    if hybrid:
        local = get_local_world_size()
        if world % local:
            raise ValueError(f"HYBRID_SHARD: the {world} ranks do not split into hosts of "
                             f"{local}; pass device_mesh")
        return init_device_mesh("cpu", (world // local, local),
                                mesh_dim_names=("replicate", "shard"))
    if process_group is None:
        return None
    return DeviceMesh("cpu", list(process_group.ranks), _groups=[process_group])


def _broadcast_from_rank0(module):
    for tensor in list(module.parameters()) + list(module.buffers()):
        broadcast(tensor._array, src=0)
