"""sum, mean, amax and amin over an array's last dimensions (kernels/compiled/reduction.py's
row loops, taken from COMPILED_FROM elements on) against torch: float64 and float32, keepdim, every
trailing set of dimensions and the whole array, nan and inf; the inputs that stay numpy's
(other dimensions, strided, integer, half, a dtype= argument, small) still give torch's
result."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.kernels.numpy._compiled import COMPILED_FROM  # noqa: E402
from mpigrad.kernels.numpy.reduction import (_as_rows, _per_channel_rows,  # noqa: E402
                                             _summed_rows)

from .torch_check import check  # noqa: E402

SHAPE = (6, 37, 2 * COMPILED_FROM // 222 + 1)  # above COMPILED_FROM, odd row lengths


def _inputs(shape=SHAPE, seed=3):
    return np.random.default_rng(seed).standard_normal(shape) * 4


CASES = [(-1, False), (2, True), ((1, 2), False), ((-1, -2), True), (None, False)]


def _normalised(dim, ndim=len(SHAPE)):
    return None if dim is None else tuple(sorted(d % ndim for d in np.atleast_1d(dim)))


def _takes_compiled_rows(name, array, dim):
    rows = _summed_rows if name in ("sum", "mean") else _as_rows
    return rows(array, _normalised(dim)) is not None


def _reduce(lib, name, dim, keepdim):
    if dim is None:
        return lambda x: getattr(x, name)()
    return lambda x: getattr(x, name)(dim, keepdim=keepdim)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dim, keepdim", CASES)
def test_last_dimensions_match_torch_in_float64(name, dim, keepdim):
    """Extremes take the compiled rows in float64 too; sums stay numpy's pairwise ones."""
    assert _takes_compiled_rows(name, _inputs(), dim) == (name in ("amax", "amin"))
    check(_reduce(mg, name, dim, keepdim), _reduce(torch, name, dim, keepdim), [_inputs()],
          np.float64)


@pytest.mark.parametrize("name", ["sum", "mean"])
@pytest.mark.parametrize("dim, keepdim", CASES)
def test_float32_results_are_the_exact_ones_rounded_once(name, dim, keepdim):
    """Each row added in float64 and rounded once: torch's float32 sums of thousands of
    terms are off by more than its own float32 tolerance, so the oracle here is the float64
    sum (and torch's shape and dtype)."""
    x = _inputs().astype(np.float32)
    assert _takes_compiled_rows(name, x, dim)
    ours = _reduce(mg, name, dim, keepdim)(mg.tensor(x)).numpy()
    theirs = _reduce(torch, name, dim, keepdim)(torch.tensor(x)).numpy()
    exact = getattr(x.astype(np.float64), name)(axis=dim, keepdims=keepdim)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, np.asarray(exact).astype(np.float32))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [(0, 2, 3), (-1, 0, -2)])
def test_a_per_channel_float32_sum_is_the_exact_one_rounded_once(dim, keepdim):
    """A convolution's bias gradient, summed over all dimensions but 1: rows of each
    sample's channel in float64, then the samples in float64, rounded once."""
    x = np.random.default_rng(5).standard_normal((9, 7, 23, 29)).astype(np.float32) * 4
    assert x.size >= COMPILED_FROM and _per_channel_rows(x, (0, 2, 3)) is not None
    ours = mg.tensor(x).sum(dim, keepdim=keepdim).numpy()
    theirs = torch.tensor(x).sum(dim, keepdim=keepdim).numpy()
    exact = x.astype(np.float64).sum(axis=(0, 2, 3), keepdims=keepdim)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, exact.astype(np.float32))
    # the gradient through it is a broadcast, and float64 inputs stay numpy's pairwise sum
    check(lambda t: t.sum(dim, keepdim=keepdim), lambda t: t.sum(dim, keepdim=keepdim),
          [x.astype(np.float64)], np.float64)
    assert _per_channel_rows(x.astype(np.float64), (0, 2, 3)) is None


@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
def test_inputs_numpy_keeps_still_match_torch(name):
    x = _inputs()
    cases = [(0, x),                       # not the last dimensions
             (-1, x.transpose(2, 1, 0)),   # strided
             (-1, x.astype(np.float16)),   # half
             (-1, x[:2, :3])]              # small
    if name == "sum":
        cases += [(-1, x.astype(np.int64))]
    for dim, array in cases:
        assert not _takes_compiled_rows(name, array, dim)
        ours = getattr(mg.tensor(array), name)(dim).numpy()
        theirs = getattr(torch.tensor(array), name)(dim).numpy()
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=2e-3 if array.dtype == np.float16
                                   else 1e-5)
    if name == "sum":  # a dtype= argument is numpy's too, on an input the rows would take
        x32 = x.astype(np.float32)
        np.testing.assert_allclose(mg.tensor(x32).sum(-1, dtype=mg.float32).numpy(),
                                   torch.tensor(x32).sum(-1, dtype=torch.float32).numpy(),
                                   rtol=1e-5, atol=1e-4)


def test_nan_and_inf_propagate_by_row():
    x = _inputs().astype(np.float32)
    x[0, 0, 5], x[1, 2, 0], x[1, 2, 1], x[2, 3, 7] = np.nan, np.inf, -np.inf, np.inf
    for name in ("sum", "mean"):
        ours = getattr(mg.tensor(x), name)(-1).numpy()
        theirs = getattr(torch.tensor(x), name)(-1).numpy()
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
        np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs))
        finite = np.isfinite(theirs)
        np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-5)



@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_extremes_are_numpys_bits_with_every_nan_kept(name, dtype):
    """The maximum and minimum are exact: numpy's own, and torch's; a nan of either sign
    (x86's 0/0 and inf - inf are negative nans) makes its row's result nan, as in both."""
    x = _inputs().astype(dtype)
    x[0, 0, 5] = np.nan
    x[1, 2, 0] = -np.float64(np.inf) + np.float64(np.inf)  # a negative nan
    x[1, 3, 0], x[2, 3, 7], x[3, 4, :] = np.inf, -np.inf, -np.inf
    x[4, 5, :] = 0.0
    ours = getattr(mg.tensor(x), name)(-1).numpy()
    theirs = getattr(torch.tensor(x), name)(-1).numpy()
    expected = (np.max if name == "amax" else np.min)(x, axis=-1)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(ours, theirs)
    assert np.isnan(ours[0, 0]) and np.isnan(ours[1, 2])
