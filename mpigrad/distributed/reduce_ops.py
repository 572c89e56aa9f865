"""`ReduceOp` and its translation to MPI operations, dtype by dtype."""
import enum
import warnings

import numpy as np
from mpi4py import MPI

from ..dtypes import HALF_PRECISION


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
    # A sum of each rank's tensor times a factor; made with `_make_nccl_premul_sum(factor)`.
    PREMUL_SUM = "premul_sum"


class PremulSum:
    """ReduceOp.PREMUL_SUM with its factor, as torch's `_make_nccl_premul_sum(factor)` gives
    it: each rank's tensor is multiplied by `factor` (each rank's own) before the sum."""

    name = "PREMUL_SUM"

    def __init__(self, factor):
        self.factor = factor

    def __repr__(self):
        return f"ReduceOp.PREMUL_SUM(factor={self.factor})"


def _make_nccl_premul_sum(factor):
    """torch's spelling: the op for a sum of factor * tensor (a number, or a one-element
    tensor). It works with every MPI library, not only NCCL, in all_reduce, reduce and the
    reduce_scatters."""
    value = np.asarray(getattr(factor, "_array", factor))
    if value.size != 1 or value.dtype.kind not in "iufc":
        raise TypeError(f"the PREMUL_SUM factor must be a number or a one-element tensor, "
                        f"got {factor!r}")
    return PremulSum(value.reshape(()).item())


def kind(op):
    """The ReduceOp member an op is (PREMUL_SUM for a factor-carrying one)."""
    return ReduceOp.PREMUL_SUM if isinstance(op, PremulSum) else op


def premultiplied(op, array, in_place):
    """`array` times a PREMUL_SUM's factor (in place, or as a new array), else `array`."""
    if not isinstance(op, PremulSum):
        return array
    if in_place:
        array *= op.factor
        return array
    return np.multiply(array, op.factor, dtype=array.dtype)


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
    if op is ReduceOp.PREMUL_SUM:
        raise ValueError("ReduceOp.PREMUL_SUM needs its factor: pass "
                         "dist._make_nccl_premul_sum(factor) as the op")
    if isinstance(op, PremulSum):
        if np.dtype(dtype).kind not in "fc" or np.dtype(dtype) == np.float16:
            raise TypeError(f"ReduceOp.PREMUL_SUM needs a float32, float64 or complex tensor, "
                            f"got {np.dtype(dtype)}")
        return MPI.SUM
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a ReduceOp (e.g. ReduceOp.SUM), got {op!r}")
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        if op is ReduceOp.AVG:
            raise TypeError("ReduceOp.AVG is not defined for bool tensors")
        return _LOGICAL[op]
    if dtype in HALF_PRECISION:
        # See buffers.py on float16 and bfloat16: they move as int16 bits, which MPI would
        # sum as integers.
        raise TypeError(f"MPI defines no reductions on {dtype}; reduce a float32 copy "
                        "instead")
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
