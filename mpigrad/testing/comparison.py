"""`assert_close`: torch.testing.assert_close's semantics and messages, on mpigrad tensors."""
from collections.abc import Mapping, Sequence

import numpy as np

from ..tensor import Tensor

# torch's default (rtol, atol) per dtype; a pair takes the larger of its two dtypes' values.
_TOLERANCES = {np.dtype(np.float16): (1e-3, 1e-5), np.dtype(np.float32): (1.3e-6, 1e-5),
               np.dtype(np.float64): (1e-7, 1e-7), np.dtype(np.complex64): (1.3e-6, 1e-5),
               np.dtype(np.complex128): (1e-7, 1e-7)}


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, check_dtype=True,
                 msg=None):
    """Raise AssertionError unless `actual` and `expected` are close, as
    torch.testing.assert_close decides and words it: elementwise
    |actual - expected| <= atol + rtol * |expected| (NaNs equal only with `equal_nan`), with
    rtol and atol by dtype unless both are given (0 for integers and bool: equal), the same
    shape, and the same dtype unless `check_dtype=False` (then both are promoted). Inputs are
    mpigrad tensors, numpy arrays, Python numbers, or sequences and mappings of them (compared
    item by item). `msg`: a string replacing the message, or a callable taking it."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    try:
        _compare(actual, expected, rtol, atol, equal_nan, check_dtype, ())
    except AssertionError as error:
        text = str(error)
        if msg is not None:
            text = msg(text) if callable(msg) else msg
        raise AssertionError(text) from None


def _compare(actual, expected, rtol, atol, equal_nan, check_dtype, path):
    try:
        if _is_number(actual) and _is_number(expected):
            _compare_numbers(actual, expected, rtol, atol, equal_nan, check_dtype)
        elif isinstance(actual, (Tensor, np.ndarray)) or isinstance(expected, (Tensor, np.ndarray)):
            if type(actual) is not type(expected):
                raise TypeError(f"No comparison pair was able to handle inputs of type "
                                f"{type(actual)} and {type(expected)}.")
            _compare_arrays(_array(actual), _array(expected), rtol, atol, equal_nan,
                            check_dtype)
        elif _is_sequence(actual) and _is_sequence(expected):
            if len(actual) != len(expected):
                raise AssertionError(f"The length of the sequences mismatch: {len(actual)} != "
                                     f"{len(expected)}")
            for i, (a, e) in enumerate(zip(actual, expected)):
                _compare(a, e, rtol, atol, equal_nan, check_dtype, path + (i,))
            return
        elif isinstance(actual, Mapping) and isinstance(expected, Mapping):
            missing = [k for k in expected if k not in actual]
            extra = [k for k in actual if k not in expected]
            if missing or extra:
                raise AssertionError(f"The keys of the mappings do not match:\nMissing keys in "
                                     f"the actual mapping: {sorted(missing, key=str)}\n"
                                     f"Additional keys in the actual mapping: "
                                     f"{sorted(extra, key=str)}")
            for key in expected:
                _compare(actual[key], expected[key], rtol, atol, equal_nan, check_dtype,
                         path + (key,))
            return
        else:
            raise TypeError(f"No comparison pair was able to handle inputs of type "
                            f"{type(actual)} and {type(expected)}.")
    except AssertionError as error:
        if not path or "\n\nThe failure occurred for item" in str(error):
            raise
        where = "".join(f"[{key!r}]" for key in path)
        raise AssertionError(f"{error}\n\nThe failure occurred for item {where}") from None


def _is_number(value):
    return isinstance(value, (bool, int, float, complex, np.number, np.bool_))


def _is_sequence(value):
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _array(value):
    return np.asarray(value.detach()._array if isinstance(value, Tensor) else value)


def _compare_numbers(actual, expected, rtol, atol, equal_nan, check_dtype):
    if check_dtype and type(actual) is not type(expected):
        raise AssertionError(f"The (d)types do not match: {type(actual)} != {type(expected)}.")
    # Python numbers compare at their widest: float64 (complex128), as torch does.
    kind = np.complex128 if isinstance(actual, complex) or isinstance(expected, complex) \
        else np.float64 if isinstance(actual, float) or isinstance(expected, float) else np.int64
    _compare_arrays(np.asarray(actual, kind), np.asarray(expected, kind), rtol, atol, equal_nan,
                    False, scalars=True)


def _compare_arrays(actual, expected, rtol, atol, equal_nan, check_dtype, scalars=False):
    if actual.shape != expected.shape:
        raise AssertionError(f"The values for attribute 'shape' do not match: {actual.shape} != "
                             f"{expected.shape}.")
    if actual.dtype != expected.dtype:
        if check_dtype:
            raise AssertionError(f"The values for attribute 'dtype' do not match: "
                                 f"{actual.dtype} != {expected.dtype}.")
    if rtol is None:
        rtol = max(_TOLERANCES.get(actual.dtype, (0.0, 0.0))[0],
                   _TOLERANCES.get(expected.dtype, (0.0, 0.0))[0])
        atol = max(_TOLERANCES.get(actual.dtype, (0.0, 0.0))[1],
                   _TOLERANCES.get(expected.dtype, (0.0, 0.0))[1])
    common = np.result_type(actual, expected)
    inexact = np.issubdtype(common, np.inexact)
    if not inexact:  # integers and bool: differences as int64, without overflow or wrap
        common = np.dtype(np.int64)
    actual, expected = actual.astype(common), expected.astype(common)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        difference = np.abs(actual - expected)
        matches = (difference <= atol + rtol * np.abs(expected)) | (actual == expected)
        if inexact and equal_nan:
            matches |= np.isnan(actual) & np.isnan(expected)
        if matches.all():
            return
        relative = difference / np.abs(expected)
    close = "close" if rtol or atol else "equal"
    allowed = (lambda tolerance: f" (up to {tolerance} allowed)") if rtol or atol else \
        (lambda tolerance: "")
    if scalars or actual.ndim == 0:
        raise AssertionError(
            f"Scalars are not {close}!\n\nExpected {expected.item()} but got {actual.item()}.\n"
            f"Absolute difference: {difference.item()}{allowed(atol)}\n"
            f"Relative difference: {relative.item()}{allowed(rtol)}")
    difference, relative = difference.ravel(), relative.ravel()
    difference[matches.ravel()] = 0
    relative[matches.ravel()] = 0
    worst_absolute, worst_relative = np.argmax(difference), np.argmax(relative)
    index = lambda flat: tuple(int(i) for i in np.unravel_index(flat, actual.shape))  # noqa: E731
    mismatched, total = int((~matches).sum()), matches.size
    raise AssertionError(
        f"Tensor-likes are not {close}!\n\n"
        f"Mismatched elements: {mismatched} / {total} ({mismatched / total:.1%})\n"
        f"Greatest absolute difference: {difference[worst_absolute].item()} at index "
        f"{index(worst_absolute)}{allowed(atol)}\n"
        f"Greatest relative difference: {relative[worst_relative].item()} at index "
        f"{index(worst_relative)}{allowed(rtol)}")
