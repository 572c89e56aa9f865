"""Layers and functions PyTorch scripts use: channel dropout, softmax without dim."""
import warnings

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad import nn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)])
def test_softmax_without_dim_warns_and_guesses_as_torch(name, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    with pytest.warns(UserWarning, match=f"Implicit dimension choice for {name}"):
        ours = getattr(F, name)(mg.tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = getattr(torch.nn.functional, name)(torch.tensor(x))
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_softmax_modules_without_dim_and_dtype_argument():
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="Implicit dimension choice for log_softmax"):
        ours = nn.LogSoftmax()(mg.tensor(x))
    np.testing.assert_allclose(ours.data, torch.nn.LogSoftmax(dim=0)(torch.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)
    cast = F.softmax(mg.tensor(x), dim=-1, dtype=mg.float64)
    assert cast.dtype == np.float64


@pytest.mark.parametrize("layer, shape, kept_shape", [
    (nn.Dropout2d, (4, 6, 3, 3), (4, 6, 1, 1)),
    (nn.Dropout1d, (4, 6, 5), (4, 6, 1)),
    (nn.Dropout1d, (6, 5), (6, 1)),
])
def test_channel_dropout_keeps_or_drops_whole_channels(layer, shape, kept_shape):
    mg.manual_seed(0)
    x = mg.ones(*shape, requires_grad=True)
    out = layer(p=0.5)(x)
    channels = kept_shape[:-1] if layer is nn.Dropout1d else kept_shape[:2]
    per_channel = out.detach().numpy().reshape(*channels, -1)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(axis=-1) == per_channel.max(axis=-1)).all()  # whole channels
    assert 0 < (per_channel[..., 0] == 0).sum() < per_channel[..., 0].size
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.data, out.data)  # the gradient is the same mask
    evaluating = layer(p=0.5).eval()
    assert evaluating(x) is x


def test_dropout2d_on_3d_input_warns_as_torch_and_drops_channels_of_n_c_l():
    x = mg.ones(2, 8, 5)
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        out = F.dropout2d(x, 0.5)
    assert (out.detach().numpy().min(axis=-1) == out.detach().numpy().max(axis=-1)).all()
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
        F.dropout1d(mg.ones(2, 3, 4, 5))
    with pytest.raises(ValueError, match="(?i)dropout probability has to be between 0 and 1"):
        nn.Dropout2d(p=1.5)


def test_channel_dropout_repr_and_p_one_match_torch():
    assert repr(nn.Dropout2d(0.3)) == repr(torch.nn.Dropout2d(0.3))
    assert repr(nn.Dropout1d(0.3)) == repr(torch.nn.Dropout1d(0.3))
    x = mg.ones(2, 3, 4, 4)
    np.testing.assert_array_equal(F.dropout2d(x, 1.0).data, 0)


@pytest.mark.parametrize("name, args", [
    ("MaxPool2d", (3, 2, 1)), ("MaxPool2d", (2,)), ("MaxPool2d", ((2, 3), (1, 2), (1, 0))),
    ("AvgPool2d", (3, 2, 1)), ("AvgPool2d", (2,)), ("AvgPool2d", ((2, 3), 1)),
])
def test_pooling_keeps_its_arguments_as_given_as_torch(name, args):
    """Found by tests/programs/siamese_network.py printing its model: the sizes print (and
    read back) as given, `MaxPool2d(kernel_size=3, stride=2, ...)`, not as pairs."""
    ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(ours) == repr(theirs)
    for attribute in ("kernel_size", "stride", "padding"):
        assert getattr(ours, attribute) == getattr(theirs, attribute)
    x = np.random.default_rng(2).standard_normal((1, 2, 7, 8))
    np.testing.assert_allclose(ours(mg.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(),
                               rtol=1e-12)


def _module_lists(lib):
    class Block(lib.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = lib.nn.Linear(width, width)
            self.act = lib.nn.GELU()

    class Scaled(lib.nn.Module):
        """extra_repr and children: torch puts the extra line above the children."""

        def __init__(self):
            super().__init__()
            self.inner = lib.nn.ReLU()

        def extra_repr(self):
            return "scale=2"

    return [
        lib.nn.ModuleList([Block(4) for _ in range(3)]),
        lib.nn.ModuleList([Block(4), Block(4), Block(5), Block(4), lib.nn.ReLU()]),
        lib.nn.ModuleList([lib.nn.Tanh()]),
        lib.nn.ModuleList(),
        lib.nn.Sequential(lib.nn.ReLU(), lib.nn.ReLU()),  # not collapsed: only ModuleList is
        lib.nn.ModuleDict({"h": lib.nn.ModuleList([Block(2), Block(2)]), "s": Scaled()}),
    ]


def test_module_and_module_list_reprs_are_torchs():
    """Found by tests/programs/gpt.py printing its model: torch shows a ModuleList's run of
    equal blocks as one `(0-1): 2 x Block(` entry."""
    for ours, theirs in zip(_module_lists(mg), _module_lists(torch)):
        assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"elementwise_affine": False}])
def test_layer_norm_repr_names_its_bias_as_torch(kwargs):
    """Found by tests/programs/test_programs.py's word model (a TransformerEncoderLayer's
    norms): torch 2.13 prints `bias=True` after elementwise_affine."""
    assert repr(nn.LayerNorm((3, 4), **kwargs)) == repr(torch.nn.LayerNorm((3, 4), **kwargs))
