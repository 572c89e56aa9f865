"""Every layer's input and parameter gradients against finite differences (float64)."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.nn import functional as F


def check_module(module, *shape, wrt_input=True):
    """gradcheck of module(x) with respect to x and every parameter."""
    x = mg.randn(*shape, requires_grad=wrt_input)
    params = list(module.parameters())
    assert gradcheck(lambda x, *ps: module(x), (x, *params))


@pytest.mark.parametrize("make,shape", [
    (lambda: nn.Linear(4, 3), (2, 4)),
    (lambda: nn.Linear(4, 3, bias=False), (2, 5, 4)),
    (lambda: nn.Conv2d(2, 3, 3, stride=2, padding=1), (2, 2, 5, 5)),
    (lambda: nn.Conv2d(2, 2, (2, 3), stride=(1, 2), padding=(0, 1)), (1, 2, 4, 5)),
    (lambda: nn.Conv2d(2, 4, 2, dilation=2, groups=2, bias=False), (1, 2, 5, 4)),
    (lambda: nn.Conv2d(1, 2, (2, 3), padding="same"), (1, 1, 4, 4)),
    (lambda: nn.MaxPool2d(2), (1, 2, 4, 4)),
    (lambda: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (1, 2, 6, 5)),
    (lambda: nn.AvgPool2d(2), (1, 2, 4, 4)),
    (lambda: nn.AvgPool2d(3, 2, padding=1, count_include_pad=False, ceil_mode=True), (1, 1, 6, 5)),
    (lambda: nn.BatchNorm1d(3), (4, 3)),
    (lambda: nn.BatchNorm1d(2), (3, 2, 3)),
    (lambda: nn.BatchNorm2d(2), (2, 2, 2, 3)),
    (lambda: nn.BatchNorm2d(2, track_running_stats=False), (2, 2, 2, 2)),
    (lambda: nn.LayerNorm(4), (3, 4)),
    (lambda: nn.LayerNorm((2, 3)), (2, 2, 3)),
    (lambda: nn.GroupNorm(3, 6), (2, 6, 3, 2)),
    (lambda: nn.ReLU(), (3, 4)),
    (lambda: nn.LeakyReLU(0.1), (3, 4)),
    (lambda: nn.GELU(), (3, 4)),
    (lambda: nn.GELU("tanh"), (3, 4)),
    (lambda: nn.SiLU(), (3, 4)),
    (lambda: nn.Tanh(), (3, 4)),
    (lambda: nn.Sigmoid(), (3, 4)),
    (lambda: nn.Softmax(dim=1), (3, 4)),
    (lambda: nn.LogSoftmax(dim=0), (3, 4)),
    (lambda: nn.Flatten(), (2, 3, 2)),
    (lambda: nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), (2, 3)),
], ids=lambda v: "" if callable(v) else str(v))
def test_layer_gradients(make, shape):
    check_module(make(), *shape)


def test_batch_norm_eval_gradients_use_running_statistics():
    bn = nn.BatchNorm2d(2)
    bn(mg.randn(4, 2, 3, 3) * 3 + 1)
    bn.eval()
    with mg.no_grad():
        bn.weight.normal_()
    check_module(bn, 2, 2, 2, 2)


def test_embedding_gradient_adds_up_repeated_indices():
    emb = nn.Embedding(5, 3)
    idx = mg.tensor([[0, 3, 3], [3, 1, 0]])
    assert gradcheck(lambda w: F.embedding(idx, w), emb.weight)
    emb(idx).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.data[:, 0], [2, 1, 0, 3, 0])


def test_dropout_gradient_is_the_mask_scaled():
    def run(x):
        mg.manual_seed(7)  # the same mask on every call, so finite differences see one function
        return F.dropout(x, p=0.4)

    x = mg.randn(4, 5, requires_grad=True)
    assert gradcheck(run, x)
    out = run(x)
    out.sum().backward()
    kept = out.data != 0
    np.testing.assert_allclose(x.grad.data, kept / 0.6)
    np.testing.assert_allclose(out.data[kept], x.data[kept] / 0.6)


def test_unfold_and_fold_gradients():
    x = mg.randn(1, 2, 4, 5, requires_grad=True)
    kw = dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    assert gradcheck(lambda x: F.unfold(x, **kw), x)
    cols = mg.randn(*F.unfold(x, **kw).shape, requires_grad=True)
    assert gradcheck(lambda c: F.fold(c, (4, 5), **kw), cols)


CLASSES = mg.tensor([0, 2, 1, 2])
SCORES = mg.tensor(np.random.default_rng(5).standard_normal((4, 3)))
# soft targets made with numpy: mpigrad's softmax here would compile at collection, in
# every pytest process
_exp = np.exp(SCORES.numpy() - SCORES.numpy().max(1, keepdims=True))
PROBABILITIES = mg.tensor(_exp / _exp.sum(1, keepdims=True))


@pytest.mark.parametrize("loss,target", [
    (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2), CLASSES),
    (lambda x, t: F.cross_entropy(x, t, mg.tensor([1.0, 2.0, 0.5]), reduction="sum"), CLASSES),
    (lambda x, t: F.cross_entropy(x, t, ignore_index=1, reduction="mean"), CLASSES),
    (lambda x, t: F.cross_entropy(x, t, reduction="none"), PROBABILITIES),
    (lambda x, t: F.nll_loss(x.log_softmax(1), t, reduction="none"), CLASSES),
    (lambda x, t: F.mse_loss(x, t), SCORES),
])
def test_loss_gradients(loss, target):
    x = mg.randn(4, 3, requires_grad=True)
    assert gradcheck(lambda x: loss(x, target), x)


def test_linear_second_derivatives():
    lin = nn.Linear(3, 2)
    assert gradgradcheck(lambda x, w, b: F.linear(x, w, b),
                         (mg.randn(2, 3, requires_grad=True), lin.weight, lin.bias))


def test_conv2d_second_derivatives():
    conv = nn.Conv2d(2, 2, (2, 3), stride=2, padding=1)
    x = mg.randn(1, 2, 4, 4, requires_grad=True)
    assert gradgradcheck(lambda x, w, b: conv(x), (x, conv.weight, conv.bias))


def test_tanh_mlp_second_derivatives():
    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x = mg.randn(2, 3, requires_grad=True)
    assert gradgradcheck(lambda x, *ps: F.cross_entropy(mlp(x), mg.tensor([1, 0])),
                         (x, *mlp.parameters()))
