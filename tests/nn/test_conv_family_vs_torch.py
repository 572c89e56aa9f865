"""Convolution-family modules against torch in float64: outputs, input and parameter gradients."""
import numpy as np
import pytest

import mpigrad
from mpigrad import nn
from mpigrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def _check_module_against_torch(ours, theirs, x):
    """Output, input gradient, parameter gradients and repr of a module against torch's."""
    xo = mpigrad.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    yo, yt = ours(xo), theirs(xt)
    np.testing.assert_allclose(yo.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    g = np.random.default_rng(7).standard_normal(yt.shape)
    yo.backward(mpigrad.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-10)
    for (name, po), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(po.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=name)
    assert repr(ours) == repr(theirs)


def _pair_of_conv1d(*args, **kwargs):
    ours = nn.Conv1d(*args, dtype=mpigrad.float64, **kwargs)
    theirs = torch.nn.Conv1d(*args, dtype=torch.float64, **kwargs)
    ours.load_state_dict({k: mpigrad.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("shape, kwargs", [
    ((2, 4, 9), dict(kernel_size=3)),
    ((2, 4, 9), dict(kernel_size=3, stride=2, padding=1, dilation=2)),
    ((2, 4, 9), dict(kernel_size=3, groups=2, bias=False)),
    ((2, 4, 9), dict(kernel_size=4, padding="same", dilation=1)),
    ((2, 4, 9), dict(kernel_size=3, padding="valid")),
    ((4, 8), dict(kernel_size=(2,), stride=(3,), padding=(2,), groups=4)),
])
def test_conv1d_matches_torch(shape, kwargs):
    ours, theirs = _pair_of_conv1d(4, 6 if "groups" not in kwargs else 8, **kwargs)
    _check_module_against_torch(ours, theirs, np.random.default_rng(0).standard_normal(shape))


def test_conv1d_state_dict_and_init_shapes_match_torch():
    ours = nn.Conv1d(3, 6, 5, groups=3)
    theirs = torch.nn.Conv1d(3, 6, 5, groups=3)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    bound = 1 / np.sqrt(5)
    assert np.abs(ours.weight.detach().numpy()).max() <= bound
    assert repr(ours) == repr(theirs)


def test_conv1d_functional_and_errors():
    x = np.random.default_rng(2).standard_normal((1, 2, 7))
    w = np.random.default_rng(3).standard_normal((3, 2, 2))
    out = nn.functional.conv1d(mpigrad.tensor(x), mpigrad.tensor(w), stride=2)
    ref = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), stride=2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError):
        nn.functional.conv1d(mpigrad.tensor(x), mpigrad.tensor(w[..., None]))
    with pytest.raises(RuntimeError):
        nn.functional.conv1d(mpigrad.tensor(x[0, 0]), mpigrad.tensor(w))
    with pytest.raises(ValueError):
        nn.Conv1d(3, 4, 3, groups=2)



@pytest.mark.parametrize("name, args, shape", [
    ("PixelShuffle", (2,), (2, 8, 3, 5)),
    ("PixelShuffle", (3,), (9, 2, 2)),
    ("PixelShuffle", (2,), (2, 1, 4, 3, 2)),
    ("PixelUnshuffle", (2,), (2, 3, 4, 6)),
    ("PixelUnshuffle", (3,), (1, 3, 6)),
    ("Unfold", (3,), (2, 2, 5, 6)),
    ("Unfold", ((2, 3), 2, 1, (2, 1)), (1, 3, 6, 7)),
    ("Fold", ((4, 5), 2), (2, 8, 12)),
    ("Fold", ((5, 4), (2, 3), 1, 1, 2), (1, 6, 6)),
    ("ZeroPad2d", (1,), (2, 3, 4, 5)),
    ("ZeroPad2d", ((1, 2, 0, 3),), (3, 4, 5)),
    ("ConstantPad2d", ((2, 0, 1, 1), 3.5), (1, 2, 3, 4)),
])
def test_rearranging_modules_match_torch(name, args, shape):
    x = np.random.default_rng(4).standard_normal(shape)
    _check_module_against_torch(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), x)


@pytest.mark.parametrize("fn, shape, factor, message", [
    ("pixel_shuffle", (1, 5, 2, 2), 2, "divisible by the square of upscale_factor"),
    ("pixel_shuffle", (5, 2), 2, "at least 3 dimensions"),
    ("pixel_unshuffle", (1, 1, 3, 4), 2, "height to be divisible"),
    ("pixel_unshuffle", (1, 1, 4, 3), 2, "width to be divisible"),
])
def test_pixel_shuffle_errors_match_torch(fn, shape, factor, message):
    with pytest.raises(RuntimeError, match=message):
        getattr(torch.nn.functional, fn)(torch.zeros(shape), factor)
    with pytest.raises(RuntimeError, match=message):
        getattr(nn.functional, fn)(mpigrad.zeros(*shape), factor)


@pytest.mark.parametrize("args, kwargs, shape", [
    ((2, 4), {}, (3, 4, 5, 2)),
    ((1, 6), dict(eps=1e-3), (2, 6, 3)),
    ((3, 6), dict(affine=False), (2, 6, 2, 2)),
    ((6, 6), dict(bias=False), (2, 6)),
])
def test_group_norm_matches_torch(args, kwargs, shape):
    ours = nn.GroupNorm(*args, dtype=mpigrad.float64, **kwargs)
    theirs = torch.nn.GroupNorm(*args, dtype=torch.float64, **kwargs)
    rng = np.random.default_rng(5)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.tensor(rng.standard_normal(p.shape)))
    ours.load_state_dict({k: mpigrad.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    _check_module_against_torch(ours, theirs, rng.standard_normal(shape))


def test_group_norm_errors_match_torch():
    with pytest.raises(ValueError, match="must be divisible by num_groups"):
        nn.GroupNorm(3, 4)
    with pytest.raises(RuntimeError, match="divisible by num_groups, but got input of shape"):
        nn.functional.group_norm(mpigrad.zeros(2, 5, 3), 2)


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.Conv1d(2, 4, 3, stride=2, padding=1, groups=2), (2, 2, 5)),
    (lambda: nn.Conv1d(2, 3, 2, padding="same", dilation=2), (1, 2, 4)),
    (lambda: nn.GroupNorm(2, 4), (2, 4, 3)),
    (lambda: nn.PixelShuffle(2), (1, 4, 2, 3)),
    (lambda: nn.PixelUnshuffle(2), (1, 1, 2, 4)),
    (lambda: nn.Fold((3, 3), 2), (1, 4, 4)),
    (lambda: nn.AdaptiveAvgPool2d((2, 3)), (1, 2, 5, 4)),
    (lambda: nn.AdaptiveAvgPool1d(2), (2, 3)),
])
def test_new_modules_pass_gradcheck_and_gradgradcheck(make, shape):
    module = make().double()
    x = mpigrad.tensor(np.random.default_rng(6).standard_normal(shape), requires_grad=True)
    inputs = (x, *module.parameters())
    assert gradcheck(lambda x, *ps: module(x), inputs)
    assert gradgradcheck(lambda x, *ps: module(x), inputs)


@pytest.mark.parametrize("name, output_size, shape", [
    ("AdaptiveAvgPool2d", 1, (2, 3, 5, 4)),
    ("AdaptiveAvgPool2d", (3, 2), (2, 3, 7, 5)),
    ("AdaptiveAvgPool2d", (None, 4), (3, 5, 6)),
    ("AdaptiveAvgPool2d", 6, (1, 2, 4, 5)),
    ("AdaptiveAvgPool1d", 3, (2, 3, 7)),
    ("AdaptiveAvgPool1d", 4, (3, 4)),
])
def test_adaptive_avg_pool_matches_torch(name, output_size, shape):
    x = np.random.default_rng(8).standard_normal(shape)
    _check_module_against_torch(getattr(nn, name)(output_size),
                                getattr(torch.nn, name)(output_size), x)


def test_adaptive_avg_pool_errors_match_torch():
    with pytest.raises(RuntimeError, match=r"Expected 3D or 4D tensor, but got \[2, 3\]"):
        nn.functional.adaptive_avg_pool2d(mpigrad.zeros(2, 3), 2)
    with pytest.raises(RuntimeError, match="output_size must be 2"):
        nn.functional.adaptive_avg_pool2d(mpigrad.zeros(1, 2, 3, 3), (2, 2, 2))
