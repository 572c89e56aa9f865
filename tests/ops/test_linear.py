"""linear's three forward kernels (x @ W^T with the bias added after or, compiled, copied
into the output first; and W @ x^T copied back for wide layers) against each other and
against torch in float64, to 1e-10, with gradients of both orders (the fused backward,
which folds batch dimensions into one GEMM, and the rules)."""
import math

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import ops
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.kernels.numpy import linalg
from mpigrad.ops import arithmetic

TOL = dict(rtol=1e-10, atol=1e-10)

# (input shape, out_features, bias): batch 1, odd sizes, 1-D, 3-D and 4-D inputs (their batch
# dimensions folded into rows, in the forward and the gradients), an empty batch, and a
# non-contiguous input below.
CASES = [((5, 7), 3, True), ((1, 7), 4, False), ((6, 9), 11, True), ((2, 3, 7), 5, True),
         ((7,), 3, True), ((2, 1, 3, 7), 4, False), ((2, 3, 2, 7), 4, False),
         ((2, 0, 7), 3, True)]


@pytest.fixture(params=["transposed", "plain", "addmm"])
def kernel(request, monkeypatch):
    """Force one forward kernel for every size: W @ x^T copied back, x @ W^T with the bias
    added after, or (with a bias) the compiled addmm, bias first."""
    monkeypatch.setattr(arithmetic, "_transposed_gemm_pays",
                        lambda rows, out_features: request.param == "transposed")
    monkeypatch.setattr(linalg, "COMPILED_FROM", 0 if request.param == "addmm" else math.inf)
    return request.param


def _leaves(rng, x_shape, out_features, bias):
    shapes = [x_shape, (out_features, x_shape[-1])] + ([(out_features,)] if bias else [])
    return [mg.tensor(rng.standard_normal(s), dtype=mg.float64, requires_grad=True)
            for s in shapes]


@pytest.mark.parametrize("x_shape, out_features, bias", CASES)
def test_linear_kernels_match_the_matmul_composition(x_shape, out_features, bias, kernel):
    leaves = _leaves(np.random.default_rng(0), x_shape, out_features, bias)
    x, w = leaves[:2]
    b = leaves[2] if bias else None
    out = ops.linear(x, w, b)
    assert out.is_contiguous()
    expected = x.data @ w.data.T + (b.data if bias else 0)
    np.testing.assert_allclose(out.data, expected, **TOL)
    assert gradcheck(lambda *a: ops.linear(*a[:2], a[2] if bias else None), leaves)
    assert gradgradcheck(lambda *a: ops.linear(*a[:2], a[2] if bias else None), leaves)


@pytest.mark.parametrize("x_shape, out_features, bias", CASES)
def test_linear_kernels_match_torch(x_shape, out_features, bias, kernel):
    torch = pytest.importorskip("torch")
    leaves = _leaves(np.random.default_rng(1), x_shape, out_features, bias)
    twins = [torch.tensor(t.detach().numpy(), requires_grad=True) for t in leaves]
    out = ops.linear(*leaves[:2], leaves[2] if bias else None)
    expected = torch.nn.functional.linear(*twins[:2], twins[2] if bias else None)
    np.testing.assert_allclose(out.data, expected.detach().numpy(), **TOL)
    g = np.random.default_rng(2).standard_normal(out.shape)
    out.backward(mg.tensor(g))
    expected.backward(torch.tensor(g))
    for mine, theirs in zip(leaves, twins):
        np.testing.assert_allclose(mine.grad.data, theirs.grad.numpy(), **TOL)


def test_transposed_kernel_reads_a_non_contiguous_input(kernel):
    rng = np.random.default_rng(3)
    x = mg.tensor(rng.standard_normal((7, 5)), dtype=mg.float64).t()
    w = mg.tensor(rng.standard_normal((4, 7)), dtype=mg.float64)
    np.testing.assert_allclose(ops.linear(x, w, None).data, x.data @ w.data.T, **TOL)
