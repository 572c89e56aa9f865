"""`FlatShard`: one rank's contiguous slice of a flattened tensor, the sharded entry of a state
dict that `save` and `load` understand (the contract is in the package docstring)."""
import math
import numbers

from ...tensor import Tensor

__all__ = ["FlatShard"]


class FlatShard:
    """Elements `[offset, offset + len(local))` of `global_shape`'s tensor flattened in row-major
    order, held by this rank in the 1-D Tensor `local` (its storage, not a copy).

    `local` may run past the tensor's end: those elements are padding (FSDP pads every shard to
    the same length), never saved and left untouched on load. A shard wholly past the end (a
    rank that holds only padding) is allowed.
    """
    __slots__ = ("local", "global_shape", "offset")

    def __init__(self, local, global_shape, offset):
        if not isinstance(local, Tensor) or local.ndim != 1:
            raise TypeError(f"FlatShard: local must be a 1-D mpigrad Tensor, got "
                            f"{_describe(local)}")
        if not (isinstance(global_shape, (tuple, list)) and all(
                isinstance(n, numbers.Integral) and n >= 0 for n in global_shape)):
            raise TypeError(f"FlatShard: global_shape must be a tuple of sizes >= 0, got "
                            f"{global_shape!r}")
        if not isinstance(offset, numbers.Integral) or offset < 0:
            raise ValueError(f"FlatShard: offset must be an int >= 0, got {offset!r}")
        self.local = local
        self.global_shape = tuple(int(n) for n in global_shape)
        self.offset = int(offset)

    @property
    def numel(self):
        """The number of elements of the whole (global) tensor."""
        return math.prod(self.global_shape)

    @property
    def length(self):
        """How many of `local`'s elements belong to the tensor (the rest is padding)."""
        return max(0, min(self.local.numel(), self.numel - self.offset))

    @property
    def dtype(self):
        return self.local.dtype

    def __repr__(self):
        return (f"FlatShard(elements [{self.offset}, {self.offset + self.length}) of shape "
                f"{self.global_shape}, {self.local.numel() - self.length} padding, "
                f"{self.dtype})")


def _describe(value):
    if isinstance(value, Tensor):
        return f"a Tensor of shape {tuple(value.shape)}"
    return type(value).__name__
