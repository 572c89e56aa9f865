"""The numpy backend's door to the compiled loops (kernels/compiled/), imported on first use.

The loops are written for contiguous 1-d float32 or float64 arrays; `flat` and `fresh`
bring any array there (a copy only when the input is strided or of another dtype), and
`loops` imports a module of loops, and with it numba, the first time a kernel needs it;
`load_blas` loads the BLAS the loops' products call.
"""
import functools
import importlib
import math

import numpy as np

from ...dtypes import is_floating_point
from ..threads import follow_new_blas

_modules = {}

# The fewest elements for which an op that numpy also does well enough takes its compiled
# loop: a reduction or a loss over a whole array, linear's addmm (output elements), a direct
# convolution (input elements) and the crop of its columns (output elements). Below, the
# loop saves a few microseconds, less than importing numba and scipy's BLAS costs a model
# that needs no other compiled loop (about a second warm, seconds more to compile on a cold
# cache: a tiny MLP's ranks then outwaited a 4 s group timeout). tests/kernels/test_startup.py
# holds a small model's step to it.
COMPILED_FROM = 1 << 15


def loops(name):
    module = _modules.get(name)
    if module is None:
        # Imported here, not at the top: numba's import costs about 0.3 s, which `import
        # mpigrad` must not pay, and a kernel compiles (or loads from cache) on first use.
        module = _modules[name] = importlib.import_module(f"mpigrad.kernels.compiled.{name}")
    return module


@functools.cache
def load_blas():
    """Load scipy's BLAS, which the loops' products call (compiled/_blas.py), here rather than
    lazily on a loop's first product (maybe on a pool thread), and have it follow
    set_num_threads as numpy's does."""
    import scipy.linalg.cython_blas  # noqa: F401  (0.3-0.6 s, for its users only)
    follow_new_blas()


def compute_dtype(dtype):
    """The dtype a loop runs in: float64 as is, every other float type through float32
    (integers, which only some ops accept, through float64, as numpy's functions do)."""
    if dtype == np.float64 or np.dtype(dtype).kind in "iub":
        return np.float64
    return np.float32


def flat(array, dtype=None):
    """`array` as a contiguous 1-d array of `dtype` (its own compute dtype by default)."""
    return np.ascontiguousarray(array, dtype or compute_dtype(array.dtype)).reshape(-1)


def fresh(shape, dtype):
    return np.empty(shape, compute_dtype(dtype))


def result(out, dtype):
    """A loop's output in the op's dtype (float16 and bfloat16 were computed in float32);
    an integer input's result stays floating."""
    if out.dtype == dtype or not is_floating_point(dtype):
        return out
    return out.astype(dtype)


def rows(array, axis, dtype=None):
    """`array` with `axis` moved last, as a contiguous (rows, C) array of `dtype` (its own
    compute dtype by default), and the moved shape to give results back."""
    moved = np.moveaxis(array, axis, -1) if array.ndim else array.reshape(1)
    shape = moved.shape
    matrix = np.ascontiguousarray(moved, dtype or compute_dtype(array.dtype))
    return matrix.reshape(math.prod(shape[:-1]), shape[-1]), shape


def unrows(matrix, shape, axis, like):
    """The inverse of `rows`: a (rows, C) result back in the layout of `like`."""
    out = matrix.reshape(shape)
    out = np.moveaxis(out, -1, axis) if like.ndim else out.reshape(())
    return result(out, like.dtype)
