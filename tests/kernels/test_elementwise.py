"""ReLU's compiled loops (kernels/compiled/elementwise.py) against torch: float64 and
float32, odd sizes, non-contiguous inputs, signed zeros, nan and infinite inputs and
gradients; integer and half inputs (numpy's path); its rule (create_graph=True, tangents)
through gradcheck and gradgradcheck."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402

from .torch_check import check  # noqa: E402


def _inputs(shape=(3, 37, 5)):
    x = np.random.default_rng(5).standard_normal(shape)
    x.flat[:4] = [0.0, -0.0, 1e-300, -1e-300]  # exactly at the threshold, and either side
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_relu_matches_torch(dtype):
    check(mg.relu, torch.relu, [_inputs()], dtype)
    check(lambda x: mg.relu(x.transpose(0, 2)[:, ::2]),
          lambda x: torch.relu(x.transpose(0, 2)[:, ::2]), [_inputs()], dtype)


def test_relu_gradient_where_g_or_the_output_is_not_finite_is_torchs():
    # g * (ans > 0) would give nan for an infinite g at a zero output; torch gives 0, and it
    # passes g where the output is nan. (float16 gradients come from the rule through the
    # precision handler, not from this kernel.)
    x = np.array([np.nan, -1.0, 0.0, 2.0, -np.inf, np.inf, 3.0])
    g = np.array([5.0, np.inf, -np.inf, 7.0, np.nan, 1.0, np.nan])
    for dtype in (np.float64, np.float32):
        ours = mg.tensor(x.astype(dtype), requires_grad=True)
        theirs = torch.tensor(x.astype(dtype), requires_grad=True)
        mg.relu(ours).backward(mg.tensor(g.astype(dtype)))
        torch.relu(theirs).backward(torch.tensor(g.astype(dtype)))
        assert ours.grad.dtype == getattr(mg, np.dtype(dtype).name)
        np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int32, np.int64])
def test_relu_forward_has_torchs_bits_and_dtype(dtype):
    x = np.array([np.nan, -0.0, 0.0, -1.5, 2.5, -np.inf, np.inf, 1e-30, -1e-30])
    if np.dtype(dtype).kind == "i":
        x = np.array([-3, 0, 4, -1, 7])
    x = x.astype(dtype)
    ours, theirs = mg.relu(mg.tensor(x)), torch.relu(torch.tensor(x))
    assert ours.dtype == getattr(mg, np.dtype(dtype).name)
    # bit for bit: nan stays nan, -0.0 stays -0.0 as in torch
    assert ours.numpy().tobytes() == theirs.numpy().tobytes()


def test_relu_through_gradcheck_and_gradgradcheck():
    x = mg.tensor(_inputs((2, 3)) + 0.05, requires_grad=True)
    assert gradcheck(mg.relu, (x,))
    assert gradgradcheck(mg.relu, (x,))
