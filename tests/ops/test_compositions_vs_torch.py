"""Random compositions of ops: gradients and second derivatives equal torch's (float64)."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd

torch = pytest.importorskip("torch")

# Each entry builds the same expression in both libraries from a namespace of ops.
UNARY = [
    lambda m, x: m.tanh(x),
    lambda m, x: m.sigmoid(x),
    lambda m, x: m.exp(x * 0.3),
    lambda m, x: (x * x + 1).log(),
    lambda m, x: (x * x + 0.5).sqrt(),
    lambda m, x: m.softmax(x, -1),
    lambda m, x: m.log_softmax(x, 0),
    lambda m, x: x.logsumexp(-1, keepdim=True) - x,
    lambda m, x: x.transpose(0, 1).reshape(x.shape),
    lambda m, x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-3).sqrt(),
    lambda m, x: m.gelu(x),
    lambda m, x: x.clamp(-1.0, 1.0) * x,
    lambda m, x: m.where(x > 0, x, x * 0.1),
    # reversal: a negative-stride view in mpigrad, flip in torch
    lambda m, x: x[:, ::-1] if isinstance(x, mg.Tensor) else x.flip(-1),
]


class TorchNS:
    tanh = staticmethod(torch.tanh)
    sigmoid = staticmethod(torch.sigmoid)
    exp = staticmethod(torch.exp)
    softmax = staticmethod(torch.softmax)
    log_softmax = staticmethod(torch.log_softmax)
    gelu = staticmethod(torch.nn.functional.gelu)
    where = staticmethod(torch.where)


class MgNS:
    tanh = staticmethod(mg.tanh)
    sigmoid = staticmethod(mg.sigmoid)
    exp = staticmethod(mg.exp)
    softmax = staticmethod(mg.softmax)
    log_softmax = staticmethod(mg.log_softmax)
    gelu = staticmethod(mg.ops.gelu)
    where = staticmethod(mg.where)


def _build(ns, x, w, picks):
    h = x @ w
    for p in picks:
        h = UNARY[p](ns, h) + h * 0.5
    return (h * h).sum()


@pytest.mark.parametrize("seed", range(12))
def test_random_compositions_match_torch(seed):
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(UNARY), size=4)
    x0 = rng.standard_normal((3, 5))
    w0 = rng.standard_normal((5, 4))

    x = mg.tensor(x0, requires_grad=True)
    w = mg.tensor(w0, requires_grad=True)
    loss = _build(MgNS, x, w, picks)
    gx, gw = autograd.grad(loss, (x, w), create_graph=True)
    # A second-order quantity: the gradient of |dL/dw|^2 with respect to x.
    (ggx,) = autograd.grad((gw * gw).sum() + gx.sum(), x)

    tx = torch.tensor(x0, requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    tloss = _build(TorchNS, tx, tw, picks)
    tgx, tgw = torch.autograd.grad(tloss, (tx, tw), create_graph=True)
    (tggx,) = torch.autograd.grad((tgw * tgw).sum() + tgx.sum(), tx)

    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(gx.detach().numpy(), tgx.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw.detach().numpy(), tgw.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ggx.numpy(), tggx.numpy(), rtol=1e-10, atol=1e-10)


def test_reductions_and_indexing_match_torch():
    rng = np.random.default_rng(0)
    a0 = rng.standard_normal((4, 6))
    idx = np.array([3, 0, 3, 1])

    def build(t, index):
        return ((t[index] * t[:, 1:4].sum(1, keepdim=True)).max(1)[0].sum()
                + t.std(0).sum() + t.norm(dim=1).sum() + t.amin())

    a = mg.tensor(a0, requires_grad=True)
    build(a, mg.tensor(idx)).backward()
    ta = torch.tensor(a0, requires_grad=True)
    build(ta, torch.tensor(idx)).backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10, atol=1e-12)
