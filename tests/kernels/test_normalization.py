"""LayerNorm and RMSNorm: the fused kernels against torch (with and without the affine
parameters, several normalised dimensions, odd sizes, strided and half input), and
gradcheck / gradgradcheck through their rules."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402

from .torch_check import check  # noqa: E402

F = mg.nn.functional
TF = torch.nn.functional


def _data(shape, seed=0, scale=1.0, shift=0.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale + shift


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("normalized", [(7,), (3, 7)])
def test_layer_norm_matches_torch(normalized, affine, dtype):
    arrays = [_data((5, 3, 7), shift=3.0)]
    arrays += [_data(normalized, 1) for _ in range({"none": 0, "weight": 1, "both": 2}[affine])]

    def run(functional):
        return lambda x, *affine_parts: functional.layer_norm(x, normalized, *affine_parts,
                                                              eps=1e-5)
    check(run(F), run(TF), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_matches_torch(eps, weighted, dtype):
    arrays = [_data((4, 3, 9), scale=2.0)] + ([_data((3, 9), 1)] if weighted else [])

    def run(functional):
        return lambda x, *weight: functional.rms_norm(x, (3, 9), *weight, eps=eps)
    check(run(F), run(TF), arrays, dtype)


def test_strided_and_half_inputs():
    check(lambda x, w, b: F.layer_norm(x.transpose(0, 1)[::2], (5,), w, b),
          lambda x, w, b: TF.layer_norm(x.transpose(0, 1)[::2], (5,), w, b),
          [_data((7, 6, 5)), _data((5,), 1), _data((5,), 2)], np.float64)
    check(lambda x, w: F.rms_norm(x[:, ::3], (4,), w), lambda x, w: TF.rms_norm(x[:, ::3], (4,), w),
          [_data((6, 9, 4)), _data((4,), 1)], np.float64)
    x = _data((3, 8)).astype(np.float16)
    out = F.layer_norm(mg.tensor(x), (8,))
    assert out.dtype == mg.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32),
                               TF.layer_norm(torch.tensor(x).float(), (8,)).numpy(), atol=2e-3)


def test_a_weight_of_the_wrong_shape_is_refused():
    with pytest.raises(RuntimeError, match="same shape as normalized_shape"):
        F.layer_norm(mg.ones(2, 4), (4,), mg.ones(2, 4))


def test_gradcheck_and_gradgradcheck():
    x, w, b = (mg.tensor(_data(s, i), requires_grad=True)
               for i, s in enumerate([(3, 2, 4), (2, 4), (2, 4)]))
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (2, 4), w, b), (x, w, b))
    assert gradgradcheck(lambda x, w, b: F.layer_norm(x, (2, 4), w, b), (x, w, b))
    assert gradcheck(lambda x, w: F.rms_norm(x, (4,), w[0], eps=1e-6), (x, w))
    assert gradgradcheck(lambda x, w: F.rms_norm(x, (4,), w[0], eps=1e-6), (x, w))
