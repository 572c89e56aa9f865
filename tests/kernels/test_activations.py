"""GELU (exact and tanh) and SiLU: their fused kernels against torch, and their rules
(create_graph=True, tangents) through gradcheck and gradgradcheck."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402

from .torch_check import check  # noqa: E402

F = mg.nn.functional
TF = torch.nn.functional

ACTIVATIONS = {
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: TF.gelu(x, approximate="tanh")),
    "silu": (F.silu, TF.silu),
}


def _inputs(shape=(3, 37, 5)):
    x = np.random.default_rng(3).standard_normal(shape) * 3
    # Where 1 + erf(x / sqrt 2) cancels (x near -3 and below), the saturated ends, and zero.
    x.flat[:12] = [-3.0, -3.1, -2.9, -5.0, -9.0, 9.0, 30.0, -30.0, 0.0, -0.0, 1e-8, -100.0]
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_matches_torch(name, dtype):
    ours, theirs = ACTIVATIONS[name]
    check(ours, theirs, [_inputs()], dtype)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_non_contiguous_and_half_inputs(name):
    ours, theirs = ACTIVATIONS[name]
    check(lambda x: ours(x.transpose(0, 2)[:, ::2]), lambda x: theirs(x.transpose(0, 2)[:, ::2]),
          [_inputs()], np.float64)
    x = _inputs((4, 6)).astype(np.float16)
    out = ours(mg.tensor(x))
    assert out.dtype == mg.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32),
                               theirs(torch.tensor(x).float()).numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_gradcheck_and_gradgradcheck(name):
    ours, _ = ACTIVATIONS[name]
    x = mg.tensor(_inputs((2, 3))[:, :] / 3 + 0.1, requires_grad=True)
    assert gradcheck(ours, (x,))
    assert gradgradcheck(ours, (x,))


def test_integer_input_is_refused_as_torch_does():
    with pytest.raises(RuntimeError, match="floating point"):
        F.gelu(mg.tensor([1, 2]))
