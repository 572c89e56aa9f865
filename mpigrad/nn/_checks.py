"""Argument checks shared by the layers and nn.functional, one per kind of mistake, so every one
words its errors alike and raises the exception type torch 2.13 raises for that kind: a
tensor that does not fit, or a size option out of range, RuntimeError; a dtype a kernel does
not take, NotImplementedError; an option torch checks in Python, ValueError (the whole rule
is in docs/architecture.md, "An argument error"; tests/nn/test_functional_errors.py compares the
types with torch's).

A check that belongs to one function stays beside it, raising by the same rule. Like
data/_checks.py, each check takes the argument's name (or the caller's) first, then its value.
"""
import numbers
import warnings

from .. import dtypes
from ..dtypes import torch_name


def positive_int(name, value, layer):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{layer}: {name} must be a positive integer, got {value!r}")
    return int(value)


def check_device(device, layer):
    if device not in (None, "cpu"):
        raise ValueError(f"{layer}: mpigrad runs on the CPU only; got device={device!r}")


# ----------------------------------------------------------------------------- sizes
def ntuple(name, value, length, minimum):
    """An int or a `length`-tuple of ints, each at least `minimum`, as a tuple."""
    values = (value,) * length if isinstance(value, numbers.Integral) else tuple(value)
    if len(values) != length or not all(isinstance(v, numbers.Integral) for v in values):
        noun = "a pair of ints" if length == 2 else f"a {length}-tuple of ints"
        raise TypeError(f"{name} must be an int or {noun}, got {value!r}")
    if any(v < minimum for v in values):
        raise RuntimeError(f"{name} must be at least {minimum}, got {value!r}")
    return tuple(int(v) for v in values)


def pair(name, value, minimum):
    """An int or a pair of ints, each at least `minimum`, as a (height, width) tuple."""
    return ntuple(name, value, 2, minimum)


def single(name, value, minimum):
    return ntuple(name, value, 1, minimum)


def kernel_fits(what, extent, size, padding):
    """The (dilated) kernel `extent` must fit in the input `size` padded on both sides."""
    padded = tuple(n + 2 * p for n, p in zip(size, padding))
    if any(e > p for e, p in zip(extent, padded)):
        raise RuntimeError(f"{what}: the (dilated) kernel of size {extent} is larger than the "
                           f"padded input of size {padded}")


def pool_padding(what, padding, kernel_size):
    if any(2 * p > k for p, k in zip(padding, kernel_size)):
        raise RuntimeError(f"{what}: padding {padding} should be at most half of the kernel "
                           f"size {kernel_size}")


def divisor_override(what, divisor):
    if divisor is not None and (not isinstance(divisor, numbers.Integral) or divisor <= 0):
        raise RuntimeError(f"{what}: divisor_override must be a positive integer, got "
                           f"{divisor!r}")


# ----------------------------------------------------------------------------- tensors
def input_rank(what, input, ranks):
    """`input` must have one of the two `ranks`, unbatched or batched."""
    if input.ndim not in ranks:
        raise RuntimeError(f"Expected {ranks[0]}D (unbatched) or {ranks[-1]}D (batched) input to "
                           f"{what}, but got input of size: {list(input.shape)}")


def broadcastable(a, b):
    """torch's RuntimeError for shapes that do not broadcast, naming the last dimension where
    they clash (numpy's would be a ValueError)."""
    ndim = max(len(a), len(b))
    shape_a = (1,) * (ndim - len(a)) + tuple(a)
    shape_b = (1,) * (ndim - len(b)) + tuple(b)
    for i in reversed(range(ndim)):
        if shape_a[i] != shape_b[i] and 1 not in (shape_a[i], shape_b[i]):
            raise RuntimeError(f"The size of tensor a ({shape_a[i]}) must match the size of "
                               f"tensor b ({shape_b[i]}) at non-singleton dimension {i}")


def floating(kernel, input):
    """torch's dispatch error of a `kernel` that takes floating point input only."""
    if not dtypes.is_floating_point(input.dtype):
        raise NotImplementedError(f'"{kernel}" not implemented for {torch_name(input.dtype)!r}')


# ----------------------------------------------------------------------------- options
def probability(what, p):
    if not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"{what} has to be between 0 and 1, but got {p!r}")


def reduction(name, extra=()):
    if name not in ("mean", "sum", "none") + extra:
        raise ValueError(f"{name} is not a valid value for reduction")


def legacy_reduction(size_average, reduce, reduction_name, extra=()):
    """`reduction_name`, or what torch makes of the deprecated size_average and reduce flags
    (each True when left out): no reduce gives 'none', else 'mean' or 'sum' by size_average."""
    if size_average is None and reduce is None:
        reduction(reduction_name, extra)
        return reduction_name
    if reduce is False:
        reduction_name = "none"
    else:
        reduction_name = "sum" if size_average is False else "mean"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction_name}' instead.", stacklevel=3)
    return reduction_name


def embedding_padding_idx(what, num_embeddings, padding_idx):
    """padding_idx as a non-negative row (or None)."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise AssertionError(f"{what}: padding_idx must be within num_embeddings "
                             f"({num_embeddings}), got {padding_idx}")
    return padding_idx % num_embeddings
