"""`ReduceOp` and its translation to MPI operations, dtype by dtype."""
import enum
import warnings

import numpy as np
from mpi4py import MPI


class ReduceOp(enum.Enum):
    """How a reduction combines the ranks' values, as in `torch.distributed.ReduceOp`."""
    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"
    AVG = "avg"


class _DeprecatedReduceOp:
    """`dist.reduce_op`, torch's deprecated spelling of `ReduceOp`: the same members, with
    torch's FutureWarning on use."""

    def __getattr__(self, name):
        warnings.warn("`torch.distributed.reduce_op` is deprecated, please use "
                      "`torch.distributed.ReduceOp` instead", FutureWarning, stacklevel=2)
        return getattr(ReduceOp, name)


reduce_op = _DeprecatedReduceOp()

_NUMERIC = {
    ReduceOp.SUM: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD, ReduceOp.MIN: MPI.MIN,
    ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND, ReduceOp.BOR: MPI.BOR,
    ReduceOp.BXOR: MPI.BXOR,
    # MPI has no average: sum, then divide by the group size once the data has arrived.
    ReduceOp.AVG: MPI.SUM,
}
# MPI only allows logical operations on C_BOOL. These give the answers the arithmetic ops have
# on {0, 1} saturated to bool (SUM is "any", PRODUCT is "all"), as torch does for bool tensors.
_LOGICAL = {
    ReduceOp.SUM: MPI.LOR, ReduceOp.PRODUCT: MPI.LAND, ReduceOp.MIN: MPI.LAND,
    ReduceOp.MAX: MPI.LOR, ReduceOp.BAND: MPI.LAND, ReduceOp.BOR: MPI.LOR,
    ReduceOp.BXOR: MPI.LXOR,
}
_BITWISE = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)


def mpi_op(op, dtype):
    """The MPI operation that performs `op` on arrays of `dtype`, or a TypeError saying why not."""
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a ReduceOp (e.g. ReduceOp.SUM), got {op!r}")
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        if op is ReduceOp.AVG:
            raise TypeError("ReduceOp.AVG is not defined for bool tensors")
        return _LOGICAL[op]
    if dtype == np.float16:
        # See buffers.py on float16: MPI-3 defines no reductions on it.
        raise TypeError("MPI defines no reductions on float16; reduce a float32 copy instead")
    if op is ReduceOp.AVG and dtype.kind in "iu":
        raise TypeError(f"ReduceOp.AVG needs a floating-point or complex tensor, got {dtype}: "
                        "an integer average would have to round. Use ReduceOp.SUM and divide.")
    if op in _BITWISE and dtype.kind not in "iu":
        raise TypeError(f"ReduceOp.{op.name} needs an integer or bool tensor, got {dtype}")
    if op in (ReduceOp.MIN, ReduceOp.MAX) and dtype.kind == "c":
        raise TypeError(f"ReduceOp.{op.name} is not defined for complex tensors ({dtype})")
    return _NUMERIC[op]


def finish(op, arr, group_size):
    """The step MPI cannot do itself: AVG divides the summed `arr` in place."""
    if op is ReduceOp.AVG:
        np.divide(arr, group_size, out=arr)
