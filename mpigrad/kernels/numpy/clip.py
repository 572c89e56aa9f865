"""Gradient clipping's kernels for the numpy backend (kernels/compiled/clip.py): the total
p-norm of several arrays in one pass over each, and an in-place scaling."""
import math

import numpy as np

from ._compiled import loops


def _contiguous(array):
    return np.ascontiguousarray(array).reshape(-1)  # no copy when it already is


def total_norm(arrays, norm_type):
    """The norm_type-norm of all `arrays` together, as a float64 0-d array (the caller
    rounds it to the gradients' dtype); accumulated in float64."""
    add_powers = loops("clip").add_powers
    total = math.inf if norm_type == -math.inf else 0.0
    for array in arrays:
        if norm_type == 0:
            # torch's total is the 0-"norm" of the per-tensor norms: how many gradients have
            # any non-zero, not how many elements are non-zero
            nonzeros = add_powers(_contiguous(array), 0.0, 0.0)
            total += nonzeros if nonzeros != nonzeros else float(nonzeros > 0)
            continue
        total = add_powers(_contiguous(array), float(norm_type), total)
    if norm_type in (math.inf, -math.inf, 0):
        return np.asarray(total)
    return np.asarray(math.sqrt(total) if norm_type == 2 else total ** (1.0 / norm_type))


def scale_(array, factor):
    """array *= factor in place (factor cast to the array's dtype)."""
    flat = _contiguous(array)
    loops("clip").scale(flat, array.dtype.type(factor))
    if not np.shares_memory(flat, array):
        array[...] = flat.reshape(array.shape)
