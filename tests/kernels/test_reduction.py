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

from .torch_check import check  # noqa: E402

SHAPE = (6, 37, 2 * COMPILED_FROM // 222 + 1)  # above COMPILED_FROM, odd row lengths


def _inputs(shape=SHAPE, seed=3):
    return np.random.default_rng(seed).standard_normal(shape) * 4


CASES = [(-1, False), (2, True), ((1, 2), False), ((-1, -2), True), (None, False)]


def _reduce(lib, name, dim, keepdim):
    if dim is None:
        return lambda x: getattr(x, name)()
    return lambda x: getattr(x, name)(dim, keepdim=keepdim)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dim, keepdim", CASES)
def test_last_dimensions_match_torch_in_float64(name, dim, keepdim):
    check(_reduce(mg, name, dim, keepdim), _reduce(torch, name, dim, keepdim), [_inputs()],
          np.float64)


@pytest.mark.parametrize("name", ["sum", "mean"])
@pytest.mark.parametrize("dim, keepdim", CASES)
def test_float32_results_are_the_exact_ones_rounded_once(name, dim, keepdim):
    """Each row added in float64 and rounded once: torch's float32 sums of thousands of
    terms are off by more than its own float32 tolerance, so the oracle here is the float64
    sum (and torch's shape and dtype)."""
    x = _inputs().astype(np.float32)
    ours = _reduce(mg, name, dim, keepdim)(mg.tensor(x)).numpy()
    theirs = _reduce(torch, name, dim, keepdim)(torch.tensor(x)).numpy()
    exact = getattr(x.astype(np.float64), name)(axis=dim, keepdims=keepdim)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, np.asarray(exact).astype(np.float32))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
def test_inputs_numpy_keeps_still_match_torch(name):
    x = _inputs()
    cases = [(lambda t: getattr(t, name)(0), x),                       # not the last dimensions
             (lambda t: getattr(t, name)(-1), x.transpose(2, 1, 0)),   # strided
             (lambda t: getattr(t, name)(-1), x.astype(np.float16)),   # half
             (lambda t: getattr(t, name)(-1), x[:2, :3])]              # small
    if name == "sum":
        cases += [(lambda t: t.sum(-1), x.astype(np.int64)),
                  (lambda t: t.sum(-1, dtype=t.dtype), x.astype(np.float32))]
    for reduce, array in cases:
        ours = reduce(mg.tensor(array)).numpy()
        theirs = reduce(torch.tensor(array)).numpy()
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=2e-3 if array.dtype == np.float16
                                   else 1e-5)


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
