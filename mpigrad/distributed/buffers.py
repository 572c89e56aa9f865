"""Tensors and numpy arrays as MPI buffers: validation, datatypes, version bumps.

Everything the collectives move goes through `array_of`, so a Tensor is always sent as the
memory of its `_array` (never pickled) and bad input fails here with one clear message.

float16. MPI-3 has no half-precision type. To *move* float16 data (send, broadcast, gather)
its bit patterns travel as INT16_T, which is exact. To *reduce* it, an MPI needs the
MPI_FLOAT16_T extension (MPICH >= 4.2 has it; many builds do not), probed once by
`float16_sum_supported`. The collectives refuse to reduce float16 (reduce_ops.mpi_op);
DistributedDataParallel reduces float16 gradients only when the probe succeeds
(`mpi_float_type`), and fp16_compress_hook falls back to gathering the float16 buffers and
summing them locally when it fails.

bfloat16 (ml_dtypes) is moved the same way, as INT16_T bits; MPI has no bfloat16 type at all,
so nothing reduces it (FSDP asks for a float32 reduce_dtype).
"""
import numpy as np
from mpi4py import MPI

from ..dtypes import bfloat16
from ..tensor import Tensor

# Predefined MPI datatypes only: mpi4py's automatic mapping hands out duplicated (user)
# datatypes for some of these, and MPI defines no reductions on user datatypes.
_MPI_TYPES = {
    np.dtype(np.bool_): MPI.C_BOOL,
    np.dtype(np.int8): MPI.INT8_T,
    np.dtype(np.int16): MPI.INT16_T,
    np.dtype(np.int32): MPI.INT32_T,
    np.dtype(np.int64): MPI.INT64_T,
    np.dtype(np.uint8): MPI.UINT8_T,
    np.dtype(np.uint16): MPI.UINT16_T,
    np.dtype(np.uint32): MPI.UINT32_T,
    np.dtype(np.uint64): MPI.UINT64_T,
    np.dtype(np.float16): MPI.INT16_T,  # bits only; see "float16" above
    bfloat16: MPI.INT16_T,  # bits only, as float16
    np.dtype(np.float32): MPI.FLOAT,
    np.dtype(np.float64): MPI.DOUBLE,
    np.dtype(np.complex64): MPI.C_FLOAT_COMPLEX,
    np.dtype(np.complex128): MPI.C_DOUBLE_COMPLEX,
}

SUPPORTED_DTYPES = tuple(_MPI_TYPES)


def _describe(arr):
    return f"shape {tuple(arr.shape)} and dtype {arr.dtype}"


def array_of(x, name, *, writable=False):
    """The numpy array behind `x` (a Tensor or an ndarray), checked for use as an MPI buffer."""
    if isinstance(x, Tensor):
        arr = x._array
    elif isinstance(x, np.ndarray):
        arr = x
    else:
        raise TypeError(f"{name} must be an mpigrad.Tensor or a numpy.ndarray, "
                        f"got {type(x).__name__}")
    if arr.dtype not in _MPI_TYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"{name} has dtype {arr.dtype!r}, which cannot be sent over MPI; "
                        f"supported (native byte order): {names}")
    if not arr.flags.c_contiguous:
        # MPI reads and writes a flat run of memory; a strided view would silently send the
        # wrong elements.
        raise ValueError(f"{name} must be C-contiguous, got a view with {_describe(arr)} and "
                         f"strides {arr.strides}; pass a contiguous copy "
                         f"(t.clone() or np.ascontiguousarray(a))")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name} receives data but its array is read-only ({_describe(arr)})")
    return arr


def arrays_of(xs, name, count, *, writable=False):
    """`array_of` for each item of a list that must hold exactly `count` tensors."""
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"{name} must be a list of {count} tensors (one per rank of the group), "
                        f"got {type(xs).__name__}")
    if len(xs) != count:
        raise ValueError(f"{name} must hold {count} tensors (one per rank of the group), "
                         f"got {len(xs)}")
    return [array_of(x, f"{name}[{i}]", writable=writable) for i, x in enumerate(xs)]


def expect_layout(arr, name, shape, dtype, like):
    """Raise unless `arr` has `shape` and `dtype` (those of `like`, named in the message)."""
    if arr.shape != tuple(shape) or arr.dtype != dtype:
        raise ValueError(f"{name} has {_describe(arr)}; expected shape {tuple(shape)} and "
                         f"dtype {dtype} to match {like}")


def message(arr):
    """The mpi4py buffer specification for a checked array."""
    return [arr, _MPI_TYPES[arr.dtype]]


def mpi_type(dtype):
    return _MPI_TYPES[np.dtype(dtype)]


_FLOAT_SUM_TYPES = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE}
_float16_support = []


def float16_sum_supported():
    """Whether this MPI library can MPI_SUM float16 (MPI_FLOAT16_T); probed once, locally."""
    if not _float16_support:
        ok = False
        datatype = getattr(MPI, "FLOAT16_T", MPI.DATATYPE_NULL)
        if datatype != MPI.DATATYPE_NULL:
            probe = np.ones(2, np.float16)
            try:
                MPI.COMM_SELF.Allreduce(MPI.IN_PLACE, [probe, datatype], MPI.SUM)
                ok = bool(probe[0] == 1)
            except MPI.Exception:
                ok = False
        _float16_support.append(ok)
    return _float16_support[0]


def mpi_float_type(dtype):
    """The MPI datatype that sums arrays of the floating `dtype` (float16 only where
    `float16_sum_supported`), for DistributedDataParallel's gradient reductions."""
    dtype = np.dtype(dtype)
    if dtype in _FLOAT_SUM_TYPES:
        return _FLOAT_SUM_TYPES[dtype]
    if dtype == np.float16 and float16_sum_supported():
        return MPI.FLOAT16_T
    raise TypeError(f"DistributedDataParallel cannot reduce gradients of dtype {dtype} with "
                    f"this MPI; use float32 or float64 parameters")


def mark_written(*objs):
    """Tell autograd that these tensors' storage changed outside it (arrays need nothing)."""
    for obj in objs:
        if isinstance(obj, Tensor):
            obj.mark_written()
