"""The policies and enums of torch.distributed.fsdp, with what each means here."""
import dataclasses
import enum

from ...dtypes import is_floating_point, to_dtype

__all__ = ["MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy", "ShardingStrategy",
           "BackwardPrefetch", "CPUOffload", "MixedPrecision"]


@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """FSDP2's mixed precision: parameters are all-gathered and used in forward and backward
    in `param_dtype`, gradients reduce-scattered in `reduce_dtype` (default: param_dtype),
    the shards (and the optimizer's state) kept in the parameters' own dtype. `output_dtype`
    casts the module's floating outputs; `cast_forward_inputs` casts its floating inputs to
    param_dtype. None everywhere (the default) changes nothing."""
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True

    def __post_init__(self):
        for name in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(self, name)
            if value is not None:
                dtype = to_dtype(value)  # a 16-bit dtype switches on their kernels' path
                if not is_floating_point(dtype):
                    raise ValueError(f"MixedPrecisionPolicy({name}={value!r}): a floating "
                                     f"dtype is needed")
                object.__setattr__(self, name, dtype)


@dataclasses.dataclass(frozen=True)
class OffloadPolicy:
    """No offloading (torch's default)."""


@dataclasses.dataclass(frozen=True)
class CPUOffloadPolicy(OffloadPolicy):
    """torch moves the shards, their gradients and the optimizer step to the CPU to save
    GPU memory. Everything of mpigrad's already lives in CPU memory, so this is accepted
    and changes nothing; `pin_memory` has no meaning without a GPU."""
    pin_memory: bool = True


class ShardingStrategy(enum.Enum):
    """FSDP1's strategies, over the same machinery as fully_shard:
    FULL_SHARD     shard parameters, gradients and optimizer state; free the full
                   parameters after forward and gather them again for backward
                   (fully_shard with reshard_after_forward=True)
    SHARD_GRAD_OP  the same, but keep the full parameters from forward to backward
                   (reshard_after_forward=False)
    NO_SHARD       every rank keeps everything; gradients are all-reduced (DDP's arithmetic)
    HYBRID_SHARD   FULL_SHARD within a group of ranks (a host by default), replicated
                   across groups: a 2-d mesh (replicate, shard)
    _HYBRID_SHARD_ZERO2  HYBRID_SHARD keeping the full parameters from forward to backward
    """
    FULL_SHARD = enum.auto()
    SHARD_GRAD_OP = enum.auto()
    NO_SHARD = enum.auto()
    HYBRID_SHARD = enum.auto()
    _HYBRID_SHARD_ZERO2 = enum.auto()


class BackwardPrefetch(enum.Enum):
    """Accepted for FSDP1's signature. Here the next unit's all-gather is always issued
    when a unit's backward starts (BACKWARD_PRE's behaviour)."""
    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


@dataclasses.dataclass(frozen=True)
class CPUOffload:
    """FSDP1's CPU offload: accepted, changes nothing (everything is in CPU memory)."""
    offload_params: bool = False


@dataclasses.dataclass(frozen=True)
class MixedPrecision:
    """FSDP1's mixed precision, mapped to MixedPrecisionPolicy (buffer_dtype: buffers are
    cast once, at wrapping)."""
    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None
    cast_forward_inputs: bool = False
