"""GELU (exact and tanh), SiLU, ELU (SELU, CELU) and softplus: their fused kernels against
torch, and their rules (create_graph=True, tangents) through gradcheck and gradgradcheck."""
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
    "elu": (F.elu, TF.elu),
    "selu": (F.selu, TF.selu),
    # CELU is ELU with input_scale 1 / alpha; torch's own CeluBackward0 is 5e-9 relative off
    # in float64, its aten.elu with that input_scale exact.
    "celu": (lambda x: F.celu(x, alpha=0.7),
             lambda x: torch.ops.aten.elu(x, 0.7, 1.0, 1 / 0.7)),
    "softplus": (F.softplus, TF.softplus),
    "softplus_beta": (lambda x: F.softplus(x, beta=-1.5, threshold=4.0),
                      lambda x: TF.softplus(x, beta=-1.5, threshold=4.0)),
}


def _inputs(shape=(3, 37, 5)):
    x = np.random.default_rng(3).standard_normal(shape) * 3
    # Where 1 + erf(x / sqrt 2) cancels (x near -3 and below), the saturated ends, and zero.
    # Where expm1 and log1p would cancel (near 0, and about ln 2 / 2 either side).
    x.flat[:12] = [-3.0, -3.1, -2.9, -5.0, -9.0, 9.0, 30.0, -30.0, 0.0, -0.0, 1e-8, -100.0]
    x.flat[12:18] = [-1e-30, -1e-6, -0.3466, -0.3465, 0.3466, 20.0]
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


def _ulps(values, exact):
    """|values - exact| in float32 ulps of the exact value (those of the smallest normal
    float32 where it is subnormal)."""
    tiny = np.finfo(np.float32).tiny
    ulp = np.spacing(np.maximum(np.abs(exact), tiny).astype(np.float32)).astype(np.float64)
    return np.abs(values.astype(np.float64) - exact) / ulp


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_float32_gelu_is_as_accurate_as_torchs_everywhere(backward):
    """The float32 GELU computes the normal CDF in float32 arithmetic. In every window of
    width 1/2 over [-14, 14], its largest error is at most torch's float32 GELU's largest
    error there, or 4 float32 ulps. Below x = -2, where torch's 1 + erf(x / sqrt 2) cancels,
    it keeps its relative precision (a loose erf there was 4.7e-4 relative off)."""
    x = np.linspace(-14, 14, 56 * 2000, endpoint=False).astype(np.float32)
    m_x, t_x = mg.tensor(x), torch.tensor(x)
    if backward:
        ones = np.ones_like(x)
        ours = F.gelu(m_x.requires_grad_())
        ours = mg.autograd.grad(ours, m_x, mg.tensor(ones))[0]
        theirs = torch.ops.aten.gelu_backward(torch.tensor(ones), t_x)
    else:
        ours, theirs = F.gelu(m_x), TF.gelu(t_x)
    ours, theirs = ours.detach().numpy(), theirs.numpy()
    assert ours.dtype == np.float32
    # Exact to float64's precision, the tail included: Phi through erfc (torch's float64
    # GELU, through 1 + erf, is 0 below x = -8.3).
    x64 = torch.tensor(x, dtype=torch.float64)
    cdf = 0.5 * torch.special.erfc(-x64 / np.sqrt(2))
    exact = (cdf + x64 * torch.exp(-x64 * x64 / 2) / np.sqrt(2 * np.pi) if backward
             else x64 * cdf).numpy()
    ours_worst = _ulps(ours, exact).reshape(56, -1).max(1)
    torch_worst = _ulps(theirs, exact).reshape(56, -1).max(1)
    worse = ours_worst > np.maximum(torch_worst, 4)
    assert not worse.any(), (x.reshape(56, -1)[worse, 0], ours_worst[worse], torch_worst[worse])
    cancelling = (x > -4) & (x < -2)
    assert (np.abs(ours - exact)[cancelling] <= 1e-6 * np.abs(exact[cancelling])).all()
