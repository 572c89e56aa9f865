"""Convolution-family modules against torch in float64: outputs, input and parameter gradients."""
import numpy as np
import pytest

import mpigrad
from mpigrad import nn

torch = pytest.importorskip("torch")


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
    x = np.random.default_rng(0).standard_normal(shape)
    xo = mpigrad.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    yo, yt = ours(xo), theirs(xt)
    np.testing.assert_allclose(yo.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    g = np.random.default_rng(1).standard_normal(yt.shape)
    yo.backward(mpigrad.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-10)
    for (name, po), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(po.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=name)


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
    with pytest.raises(ValueError):
        nn.functional.conv1d(mpigrad.tensor(x), mpigrad.tensor(w[..., None]))
    with pytest.raises(ValueError):
        nn.functional.conv1d(mpigrad.tensor(x[0, 0]), mpigrad.tensor(w))
    with pytest.raises(ValueError):
        nn.Conv1d(3, 4, 3, groups=2)
