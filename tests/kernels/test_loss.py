"""mse_loss's one node (kernels/compiled/loss.py from COMPILED_FROM elements, numpy's below)
against torch: float64 and float32, every reduction, gradients for the input and the target,
strided and half inputs, nan and inf; the composed forms (a weight, a broadcast target) still
torch's."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.kernels.numpy._compiled import COMPILED_FROM  # noqa: E402

from .torch_check import check  # noqa: E402

BIG = (5, 3, COMPILED_FROM // 15 + 7)


def _pair(shape, seed=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * 3, rng.standard_normal(shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [BIG, (3, 7)], ids=["compiled", "small"])
def test_matches_torch(shape, reduction, dtype):
    def mse(functional):
        return lambda x, t: functional.mse_loss(x, t, reduction=reduction)
    out = check(mse(mg.nn.functional), mse(torch.nn.functional), list(_pair(shape)), dtype)[0]
    assert out.grad_fn.name() == "MseLossBackward0" and out.grad_fn.op.name == "mse_loss"


def test_strided_half_and_non_finite_inputs():
    x, t = _pair(BIG)
    check(lambda a, b: mg.nn.functional.mse_loss(a.transpose(0, 2), b.transpose(0, 2)),
          lambda a, b: torch.nn.functional.mse_loss(a.transpose(0, 2), b.transpose(0, 2)),
          [x, t], np.float64)
    half = [a.astype(np.float16) for a in (x, t)]
    ours = mg.nn.functional.mse_loss(*map(mg.tensor, half))
    theirs = torch.nn.functional.mse_loss(*map(torch.tensor, half))
    assert ours.dtype == mg.float16
    np.testing.assert_allclose(float(ours), float(theirs), rtol=2e-3)
    x32 = x.astype(np.float32)
    for bad in (np.nan, np.inf):
        x32.flat[100] = bad
        ours = mg.nn.functional.mse_loss(mg.tensor(x32), mg.tensor(t.astype(np.float32)))
        theirs = torch.nn.functional.mse_loss(torch.tensor(x32), torch.tensor(t.astype(np.float32)))
        assert np.isnan(float(ours)) == np.isnan(float(theirs))
        assert np.isinf(float(ours)) == np.isinf(float(theirs))


def test_composed_forms_still_match_torch():
    x, t = _pair((4, 6))
    weight = np.random.default_rng(1).random((4, 6))
    check(lambda a, b: mg.nn.functional.mse_loss(a, b, weight=mg.tensor(weight)),
          lambda a, b: torch.nn.functional.mse_loss(a, b, weight=torch.tensor(weight)),
          [x, t], np.float64)
    with pytest.warns(UserWarning, match="target size"):
        check(lambda a, b: mg.nn.functional.mse_loss(a, b), lambda a, b:
              torch.nn.functional.mse_loss(a, b), [x, t[:1]], np.float64)
