"""The gradient of indexing (ops/shape.py's index_scatter): g added into zeros at the
indexed places, every occurrence of a repeated index adding."""
import math

import numpy as np

from ._compiled import loops


def _is_advanced(index):
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, np.ndarray) for p in parts)


def _array_axis(index):
    """The axis of the one integer array in `index` when every other entry takes a whole
    axis (x[..., positions, ...] as a gather along one axis), else None."""
    parts = index if isinstance(index, tuple) else (index,)
    arrays = [i for i, p in enumerate(parts) if isinstance(p, np.ndarray)]
    if (len(arrays) != 1 or parts[arrays[0]].dtype.kind not in "iu"
            or any(p != slice(None) for i, p in enumerate(parts) if i != arrays[0])):
        return None
    return arrays[0]


def _add_along(out, g, positions, axis):
    """out[positions along axis] += g, a repeated position adding every occurrence in order
    (as np.add.at, which goes element by element and was 4-7x slower on the gathers of
    resampling and embeddings): one compiled pass over g for float32 and float64; np.add.at
    itself for other dtypes."""
    n = out.shape[axis]
    flat = positions.reshape(-1)
    if flat.size == 0:
        return
    flat = np.where(flat < 0, flat + n, flat).astype(np.int64, copy=False)
    if flat.min() < 0 or flat.max() >= n:  # the loop does not check: never write outside
        raise IndexError(f"index {int(flat.max() if flat.max() >= n else flat.min())} is out "
                         f"of bounds for axis {axis} with size {n}")
    before = math.prod(out.shape[:axis])
    after = math.prod(out.shape[axis + 1:])
    if out.dtype not in (np.float32, np.float64):
        np.add.at(out, (slice(None),) * axis + (flat,), g.reshape(
            out.shape[:axis] + (flat.size,) + out.shape[axis + 1:]))
        return
    loops("indexing").add_along(out.reshape(before, n, after),
                                np.ascontiguousarray(g, out.dtype).reshape(before, flat.size,
                                                                           after), flat)


def index_scatter(g, index, shape):
    out = np.zeros(shape, dtype=g.dtype)
    if not _is_advanced(index):  # basic indexing (an integer array is advanced)
        out[index] = g  # not +=: a -0.0 in g stays -0.0, as in torch's slice backward
    else:
        index_add_(out, g, index)
    return out


def index_add_(out, g, index):
    """out[index] += g in place, every occurrence of a repeated index adding (getitem's
    scatter kernel: ops/core.py's Op)."""
    axis = _array_axis(index)
    if axis is not None:
        _add_along(out, g, index[axis] if isinstance(index, tuple) else index, axis)
    elif _is_advanced(index):
        np.add.at(out, index, g)
    else:
        out[index] += g
