"""Tensor factories, with torch's names and dtype rules."""
import numpy as np

from . import dtypes, random
from .tensor import Tensor


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _finish(array, requires_grad):
    t = Tensor.wrap(array)
    return t.requires_grad_(True) if requires_grad else t


def _float(dtype):
    return dtypes.get_default_dtype() if dtype is None else dtypes.to_dtype(dtype)


def tensor(data, dtype=None, requires_grad=False):
    """A new tensor holding a copy of `data` (arrays keep their dtype, Python floats become
    the default dtype, Python ints int64)."""
    return _finish(np.array(Tensor(data, dtype=dtype).data, copy=True), requires_grad)


def as_tensor(data, dtype=None):
    """Like `tensor`, but shares memory with an ndarray or Tensor when the dtype allows."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype == np.dtype(dtype)):
        return data
    return Tensor(data, dtype=dtype)


def from_numpy(array):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects an np.ndarray, got {type(array).__name__}")
    dtypes.note_half_precision(array.dtype)
    return Tensor.wrap(array)


def zeros(*size, dtype=None, requires_grad=False):
    return _finish(np.zeros(_shape(size), _float(dtype)), requires_grad)


def ones(*size, dtype=None, requires_grad=False):
    return _finish(np.ones(_shape(size), _float(dtype)), requires_grad)


def empty(*size, dtype=None, requires_grad=False):
    return _finish(np.empty(_shape(size), _float(dtype)), requires_grad)


def full(size, fill_value, dtype=None, requires_grad=False):
    if dtype is None:
        dtype = Tensor(fill_value).dtype
    return _finish(np.full(_shape((size,)), fill_value, dtype), requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    return _finish(np.zeros(t.shape, dtype or t.dtype), requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return _finish(np.ones(t.shape, dtype or t.dtype), requires_grad)


def empty_like(t, dtype=None, requires_grad=False):
    return _finish(np.empty(t.shape, dtype or t.dtype), requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad=False):
    return _finish(np.full(t.shape, fill_value, dtype or t.dtype), requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    array = np.arange(start, end, step)
    if dtype is None and array.dtype.kind == "f":
        dtype = dtypes.get_default_dtype()
    return _finish(array.astype(dtype) if dtype is not None else array, requires_grad)


def linspace(start, end, steps, dtype=None, requires_grad=False):
    return _finish(np.linspace(start, end, steps).astype(_float(dtype)), requires_grad)


def eye(n, m=None, dtype=None, requires_grad=False):
    return _finish(np.eye(n, m, dtype=_float(dtype)), requires_grad)


def randn(*size, dtype=None, generator=None, requires_grad=False):
    return _finish(random.normal_array(_shape(size), 0.0, 1.0, dtype, generator), requires_grad)


def rand(*size, dtype=None, generator=None, requires_grad=False):
    return _finish(random.uniform_array(_shape(size), 0.0, 1.0, dtype, generator), requires_grad)


def randint(low, high=None, size=(), dtype=None, generator=None):
    if high is None:
        low, high = 0, low
    return Tensor.wrap(random.integers_array(low, high, _shape((size,)), dtype, generator))


def randperm(n, generator=None):
    return Tensor.wrap(random.permutation_array(n, generator))



def multinomial(input, num_samples, replacement=False, *, generator=None):
    """torch.multinomial: `num_samples` category indices per row of `input` (1-D or 2-D
    non-negative weights, not necessarily summing to one), int64."""
    weights = input.data if isinstance(input, Tensor) else np.asarray(input)
    return Tensor.wrap(random.multinomial_array(weights, num_samples, replacement, generator))
