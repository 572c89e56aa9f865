"""clip_grad_norm_'s kernels (one float64 total over every gradient, then the scaling) against
torch for every norm type, strided gradients and float32."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.nn.utils import clip_grad_norm_  # noqa: E402


def _pairs(dtype, strided=False):
    rng = np.random.default_rng(4)
    grads = [rng.standard_normal(s).astype(dtype) * 3 for s in [(6, 5), (7,), (2, 3, 4)]]
    if strided:
        grads[0] = grads[0].T
    ours, theirs = [], []
    for g in grads:
        p, q = mg.tensor(np.zeros_like(g)), torch.zeros(g.shape, dtype=torch.tensor(g).dtype)
        p.grad, q.grad = mg.Tensor.wrap(g.copy(order="K")), torch.tensor(g)
        ours.append(p)
        theirs.append(q)
    return ours, theirs


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf, -math.inf, 0.0, 0.5])
def test_clip_grad_norm_matches_torch(norm_type, dtype):
    ours, theirs = _pairs(dtype, strided=True)
    assert not ours[0].grad._array.flags.c_contiguous
    total = clip_grad_norm_(ours, 1.5, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.5, norm_type=norm_type)
    rtol = 1e-12 if dtype == np.float64 else 2e-6
    assert total.dtype == expected.numpy().dtype
    np.testing.assert_allclose(total.item(), expected.item(), rtol=rtol)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=0)


def test_a_nan_gradient_gives_a_nan_norm():
    ours, _ = _pairs(np.float64)
    ours[1].grad.data[3] = np.nan
    assert math.isnan(clip_grad_norm_(ours, 1.0).item())
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
