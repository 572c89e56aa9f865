"""More of the convolution family against torch in float64: grouped and depthwise
convolutions, transposed convolutions, padding modes, pooling, normalisation, resampling,
Bilinear and EmbeddingBag."""
import numpy as np
import pytest

import mpigrad
from mpigrad import nn
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.nn import functional as F

from .test_conv_family_vs_torch import _check_module_against_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _tol(ours, theirs, what=""):
    ours = ours.detach().numpy() if isinstance(ours, mpigrad.Tensor) else np.asarray(ours)
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-10, atol=1e-10,
                               err_msg=what)


def _pair(module_cls, *args, **kwargs):
    """Our module and torch's with the same arguments; torch's state dict loaded into ours."""
    theirs = getattr(torch.nn, module_cls)(*args, dtype=torch.float64, **kwargs)
    ours = getattr(nn, module_cls)(*args, dtype=mpigrad.float64, **kwargs)
    ours.load_state_dict({k: mpigrad.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


def _leaves(rng, *shapes):
    arrays = [rng.standard_normal(s) for s in shapes]
    return ([mpigrad.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _check_function(ours, theirs, shapes, seed=0):
    """ours(*tensors) against theirs(*tensors): output and every input's gradient."""
    rng = np.random.default_rng(seed)
    mine, reference = _leaves(rng, *shapes)
    yo, yt = ours(*mine), theirs(*reference)
    _tol(yo, yt, "output")
    g = rng.standard_normal(tuple(yt.shape))
    yo.backward(mpigrad.tensor(g))
    yt.backward(torch.tensor(g))
    for i, (a, b) in enumerate(zip(mine, reference)):
        _tol(a.grad, b.grad, f"gradient of input {i}")


# ----------------------------------------------------------------------------- grouped
@pytest.mark.parametrize("cin, cout, groups, kernel, kwargs", [
    (4, 4, 4, 3, dict(padding=1)),                              # depthwise
    (4, 8, 4, 3, dict(stride=2, padding=1)),                    # multiplier 2, strided
    (6, 6, 3, (3, 2), dict(padding=(2, 0), dilation=2)),
    (4, 4, 4, 3, dict(stride=2)),
    (4, 12, 4, 2, dict(stride=(1, 2), padding=1, dilation=(2, 1))),
    (4, 4, 4, 3, dict(padding=3)),                              # padding beyond the kernel
    (8, 4, 2, 3, dict(stride=2, padding=2)),
])
def test_grouped_conv2d_matches_torch(cin, cout, groups, kernel, kwargs):
    ours, theirs = _pair("Conv2d", cin, cout, kernel, groups=groups, **kwargs)
    _check_module_against_torch(ours, theirs,
                                np.random.default_rng(1).standard_normal((2, cin, 7, 6)))



@pytest.mark.parametrize("transposed", [False, True])
def test_random_convolution_geometries_match_torch(transposed):
    """A seeded sweep over groups, channels per group, kernel, stride, padding, dilation
    (and output_padding): every path of the three convolution ops, against torch."""
    rng = np.random.default_rng(23 + transposed)
    checked = 0
    while checked < 40:
        groups, per_group, out_per_group = rng.integers(1, 4, 3)
        kernel, stride, dilation = (tuple(int(v) for v in rng.integers(1, 4, 2)),
                                    tuple(int(v) for v in rng.integers(1, 4, 2)),
                                    tuple(int(v) for v in rng.integers(1, 3, 2)))
        padding = tuple(int(v) for v in rng.integers(0, 3, 2))
        shape = (2, int(groups * per_group)) + tuple(int(v) for v in rng.integers(3, 8, 2))
        if transposed:
            output_padding = tuple(int(rng.integers(0, max(s, d)))
                                   for s, d in zip(stride, dilation))
            weight = (int(groups * per_group), int(out_per_group)) + kernel
            ours = lambda x, w: F.conv_transpose2d(  # noqa: E731
                x, w, None, stride, padding, output_padding, int(groups), dilation)
            theirs = lambda x, w: TF.conv_transpose2d(  # noqa: E731
                x, w, None, stride, padding, output_padding, int(groups), dilation)
        else:
            weight = (int(groups * out_per_group), int(per_group)) + kernel
            ours = lambda x, w: F.conv2d(x, w, None, stride, padding, dilation,  # noqa: E731
                                         int(groups))
            theirs = lambda x, w: TF.conv2d(x, w, None, stride, padding, dilation,  # noqa: E731
                                            int(groups))
        try:
            theirs(torch.zeros(shape, dtype=torch.float64), torch.zeros(weight,
                                                                        dtype=torch.float64))
        except RuntimeError:
            continue  # a geometry torch refuses (the kernel does not fit, say)
        _check_function(ours, theirs, [shape, weight], seed=checked)
        checked += 1

# ----------------------------------------------------------------------------- transposed
@pytest.mark.parametrize("name, args, kwargs, shape", [
    ("ConvTranspose2d", (3, 4, 3), {}, (2, 3, 5, 4)),
    ("ConvTranspose2d", (3, 4, (3, 2)), dict(stride=2, padding=1, output_padding=1), (2, 3, 4, 5)),
    ("ConvTranspose2d", (4, 6, 3), dict(stride=(2, 3), groups=2, dilation=(1, 2), bias=False),
     (1, 4, 3, 4)),
    # output_padding above the stride, allowed because the dilation is larger
    ("ConvTranspose2d", (2, 2, 2), dict(dilation=3, output_padding=(2, 1), padding=1),
     (2, 2, 3, 3)),
    ("ConvTranspose2d", (4, 4, 3), dict(groups=4, padding=1), (2, 4, 5, 5)),   # depthwise
    ("ConvTranspose2d", (4, 8, 3), dict(stride=2, groups=4, padding=1, output_padding=1),
     (2, 4, 4, 4)),
    ("ConvTranspose2d", (2, 3, 3), dict(stride=2), (2, 4, 4)),                 # unbatched
    # 3x3 stride 1 with many channels: the Winograd path of the input gradient
    ("ConvTranspose2d", (32, 32, 3), dict(padding=1), (1, 32, 8, 8)),
    ("ConvTranspose1d", (3, 5, 3), {}, (2, 3, 7)),
    ("ConvTranspose1d", (4, 2, 4), dict(stride=3, padding=2, output_padding=2, groups=2,
                                        dilation=2), (2, 4, 5)),
    ("ConvTranspose1d", (2, 2, 3), dict(stride=2, bias=False), (2, 6)),
])
def test_conv_transpose_matches_torch(name, args, kwargs, shape):
    ours, theirs = _pair(name, *args, **kwargs)
    _check_module_against_torch(ours, theirs, np.random.default_rng(2).standard_normal(shape))


@pytest.mark.parametrize("output_size", [(8, 7), [1, 2, 7, 8], (2, 7, 7)])
def test_conv_transpose_output_size_matches_torch(output_size):
    ours, theirs = _pair("ConvTranspose2d", 4, 2, 3, stride=2)
    x = np.random.default_rng(3).standard_normal((1, 4, 3, 3) if len(output_size) != 3
                                                 else (4, 3, 3))
    _tol(ours(mpigrad.tensor(x), output_size=output_size),
         theirs(torch.tensor(x), output_size=output_size))


def test_conv_transpose_functional_matches_torch():
    _check_function(lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1),
                    lambda x, w, b: TF.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1),
                    [(2, 4, 3, 3), (4, 3, 3, 3), (6,)])
    _check_function(lambda x, w: F.conv_transpose1d(x, w, stride=2, dilation=2),
                    lambda x, w: TF.conv_transpose1d(x, w, stride=2, dilation=2),
                    [(2, 3, 4), (3, 2, 2)])


@pytest.mark.parametrize("call, error, message", [
    (lambda L, x: L.conv_transpose2d(x, L_zeros(L, 4, 2, 3, 3), stride=2, output_padding=2),
     RuntimeError, "output padding must be smaller than either stride or dilation"),
    (lambda L, x: L.conv_transpose2d(x, L_zeros(L, 3, 2, 3, 3)), RuntimeError,
     "expected input.* to have 3 channels, but got 4 channels instead"),
    (lambda L, x: L.conv_transpose2d(x, L_zeros(L, 4, 2, 3, 3), groups=3), RuntimeError,
     "expected weight to be divisible by 3 at dimension 0"),
    (lambda L, x: L.conv_transpose2d(x[0, 0], L_zeros(L, 4, 2, 3, 3)), RuntimeError,
     "Expected 3D \\(unbatched\\) or 4D \\(batched\\) input to conv_transpose2d"),
    (lambda L, x: L.conv_transpose2d(x, L_zeros(L, 4, 2, 3, 3), padding=4), RuntimeError,
     "Output size is too small"),
])
def test_conv_transpose_errors_match_torch(call, error, message):
    for library, zeros in ((TF, torch.zeros), (F, mpigrad.zeros)):
        with pytest.raises(error, match=message):
            call(library, zeros(1, 4, 3, 3))


def L_zeros(library, *shape):
    return (torch if library is TF else mpigrad).zeros(*shape)


@pytest.mark.parametrize("make, error, message", [
    (lambda nn_: nn_.ConvTranspose2d(4, 2, 3, padding_mode="reflect"), ValueError,
     'Only "zeros" padding mode is supported for ConvTranspose2d'),
    (lambda nn_: nn_.ConvTranspose2d(4, 3, 3, groups=2), ValueError,
     "out_channels must be divisible by groups"),
    (lambda nn_: nn_.ConvTranspose2d(4, 2, 3, stride=2)(nn_zeros(nn_, 1, 4, 3, 3),
                                                        output_size=(9, 9)),
     ValueError, r"requested an output size of \(9, 9\), but valid sizes range from \[7, 7\] "
                 r"to \[8, 8\]"),
    (lambda nn_: nn_.ConvTranspose2d(4, 2, 3, stride=2)(nn_zeros(nn_, 1, 4, 3, 3),
                                                        output_size=(8,)),
     ValueError, "output_size must have 2 or 4 elements"),
    (lambda nn_: nn_.Conv2d(4, 2, 3, padding_mode="mirror"), ValueError,
     "padding_mode must be one of"),
])
def test_conv_module_errors_match_torch(make, error, message):
    for library in (torch.nn, nn):
        with pytest.raises(error, match=message):
            make(library)


def nn_zeros(library, *shape):
    return (torch if library is torch.nn else mpigrad).zeros(*shape)


def test_conv_transpose_state_dict_init_and_repr_match_torch():
    ours = nn.ConvTranspose2d(4, 6, (3, 2), stride=2, output_padding=1, groups=2, dilation=2,
                              bias=False)
    theirs = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=2, output_padding=1, groups=2,
                                      dilation=2, bias=False)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert repr(ours) == repr(theirs)
    # torch's fan_in for a transposed weight is its second axis times the kernel: 3 * 6
    assert np.abs(ours.weight.detach().numpy()).max() <= 1 / np.sqrt(18)
    assert np.abs(ours.weight.detach().numpy()).max() > 0.7 / np.sqrt(18)


# ----------------------------------------------------------------------------- padding
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("shape, pad", [
    ((2, 5), (2, 1)),
    ((2, 3, 5), (0, 4)),
    ((3, 4, 5), (2, 1, 3, 0)),
    ((2, 3, 4, 5), (1, 3, 2, 2)),
    ((2, 3, 4, 5), (1, 1, 0, 2, 2, 1)),
    ((1, 2, 3, 4, 5), (2, 0, 1, 1, 2, 1)),
    ((1, 1, 5), (-1, 2)),                      # a negative width crops
])
def test_pad_modes_match_torch(mode, shape, pad):
    _check_function(lambda x: F.pad(x, pad, mode), lambda x: TF.pad(x, pad, mode), [shape])


def test_pad_wraps_a_whole_period_and_replicates_beyond_the_size_as_torch():
    _check_function(lambda x: F.pad(x, (3, 3), "circular"),
                    lambda x: TF.pad(x, (3, 3), "circular"), [(1, 2, 3)])
    _check_function(lambda x: F.pad(x, (5, 0, 0, 4), "replicate"),
                    lambda x: TF.pad(x, (5, 0, 0, 4), "replicate"), [(1, 2, 3)])
    _check_function(lambda x: F.pad(x, (1, -2, 2, 0), value=1.5),
                    lambda x: TF.pad(x, (1, -2, 2, 0), value=1.5), [(2, 3, 4)])


@pytest.mark.parametrize("shape, pad, kwargs, error, message", [
    ((5,), (2, 1), dict(mode="reflect"), NotImplementedError,
     "Padding size 2 is not supported for 1D input tensor"),
    ((2, 3, 4, 5), (1, 1), dict(mode="replicate"), NotImplementedError,
     "Padding size 2 is not supported for 4D input tensor"),
    ((1, 2, 3), (3, 0), dict(mode="reflect"), RuntimeError,
     "Padding size should be less than the corresponding input dimension"),
    ((1, 2, 3), (4, 0), dict(mode="circular"), RuntimeError,
     "Padding value causes wrapping around more than once"),
    ((1, 2, 3), (1, 1), dict(mode="foo"), NotImplementedError, "Unrecognised padding mode foo"),
    ((1, 1, 5), (1,), dict(mode="reflect"), RuntimeError, "Padding length must be divisible by 2"),
    ((1, 1, 5), (1, 1), dict(mode="reflect", value=1.0), RuntimeError,
     "Padding mode \"reflect\" doesn't take in value argument"),
])
def test_pad_errors_match_torch(shape, pad, kwargs, error, message):
    with pytest.raises(error, match=message):
        TF.pad(torch.zeros(shape), pad, **kwargs)
    with pytest.raises(error, match=message):
        F.pad(mpigrad.zeros(*shape), pad, **kwargs)


@pytest.mark.parametrize("name, args, shape", [
    ("ReflectionPad1d", (2,), (2, 3, 5)),
    ("ReflectionPad2d", ((1, 0, 2, 3),), (3, 4, 5)),
    ("ReflectionPad3d", (1,), (1, 2, 3, 4, 2)),
    ("ReplicationPad1d", ((3, 1),), (3, 4)),
    ("ReplicationPad2d", (2,), (1, 2, 3, 3)),
    ("ReplicationPad3d", ((1, 2, 0, 1, 2, 0),), (2, 2, 3, 4)),
    ("CircularPad1d", (2,), (1, 2, 3)),
    ("CircularPad2d", ((1, 2, 2, 0),), (1, 2, 3, 4)),
    ("CircularPad3d", (1,), (1, 1, 2, 3, 4)),
    ("ZeroPad1d", ((2, -1),), (2, 3, 4)),
    ("ZeroPad3d", (1,), (1, 2, 2, 3)),
    ("ConstantPad1d", (2, -0.5), (3, 4)),
    ("ConstantPad3d", ((1, 0, 0, 2, 1, 1), 2.0), (1, 2, 2, 3, 1)),
])
def test_padding_modules_match_torch(name, args, shape):
    x = np.random.default_rng(9).standard_normal(shape)
    _check_module_against_torch(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), x)


@pytest.mark.parametrize("name, args, kwargs, shape", [
    ("Conv2d", (3, 4, 3), dict(padding=1, padding_mode="reflect"), (2, 3, 5, 6)),
    ("Conv2d", (3, 4, (3, 2)), dict(padding=(2, 1), stride=2, padding_mode="replicate"),
     (2, 3, 5, 6)),
    ("Conv2d", (4, 4, 3), dict(padding=2, dilation=2, groups=4, padding_mode="circular"),
     (1, 4, 5, 5)),
    ("Conv2d", (2, 3, (4, 3)), dict(padding="same", padding_mode="reflect"), (2, 2, 6, 5)),
    ("Conv2d", (2, 3, 3), dict(padding="valid", padding_mode="circular"), (2, 5, 5)),
    ("Conv1d", (2, 3, 4), dict(padding="same", dilation=2, padding_mode="circular"), (2, 2, 9)),
    ("Conv1d", (2, 3, 3), dict(padding=2, stride=2, padding_mode="replicate"), (2, 7)),
])
def test_conv_padding_modes_match_torch(name, args, kwargs, shape):
    ours, theirs = _pair(name, *args, **kwargs)
    _check_module_against_torch(ours, theirs, np.random.default_rng(10).standard_normal(shape))


# ----------------------------------------------------------------------------- pooling
@pytest.mark.parametrize("name, args, kwargs, shape", [
    ("MaxPool1d", (3,), {}, (2, 3, 8)),
    ("MaxPool1d", (3, 2, 1), dict(dilation=2, ceil_mode=True), (2, 3, 10)),
    ("MaxPool1d", (2,), dict(stride=1), (3, 7)),
    ("AvgPool1d", (3,), {}, (2, 3, 8)),
    ("AvgPool1d", (3, 2, 1), dict(ceil_mode=True, count_include_pad=False), (2, 3, 10)),
    ("AvgPool1d", (4, 3, 2), {}, (3, 9)),
    ("AdaptiveMaxPool1d", (3,), {}, (2, 3, 8)),
    ("AdaptiveMaxPool1d", (5,), {}, (3, 5)),
    ("AdaptiveMaxPool2d", ((2, 3),), {}, (2, 3, 7, 5)),
    ("AdaptiveMaxPool2d", (1,), {}, (2, 4, 3, 3)),
    ("AdaptiveMaxPool2d", ((None, 4),), {}, (3, 5, 6)),
    ("AdaptiveMaxPool2d", (5,), {}, (1, 2, 3, 4)),     # bins overlap: a winner twice
])
def test_pooling_matches_torch(name, args, kwargs, shape):
    # Distinct values: the winners are the same in both libraries.
    x = np.random.default_rng(11).permutation(np.prod(shape)).reshape(shape) / 7.0
    _check_module_against_torch(getattr(nn, name)(*args, **kwargs),
                                getattr(torch.nn, name)(*args, **kwargs), x)


@pytest.mark.parametrize("ours, theirs, shape", [
    (lambda x: F.max_pool1d(x, 2, return_indices=True),
     lambda x: TF.max_pool1d(x, 2, return_indices=True), (2, 3, 7)),
    (lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True),
     lambda x: TF.max_pool1d(x, 3, 2, 1, return_indices=True), (3, 8)),
    (lambda x: nn.AdaptiveMaxPool2d((3, 2), return_indices=True)(x),
     lambda x: torch.nn.AdaptiveMaxPool2d((3, 2), return_indices=True)(x), (2, 2, 7, 5)),
    (lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True),
     lambda x: TF.adaptive_max_pool1d(x, 3, return_indices=True), (2, 5)),
])
def test_pooling_indices_match_torch(ours, theirs, shape):
    x = np.random.default_rng(12).permutation(np.prod(shape)).reshape(shape) / 3.0
    (out, indices), (out_t, indices_t) = ours(mpigrad.tensor(x)), theirs(torch.tensor(x))
    _tol(out, out_t)
    np.testing.assert_array_equal(indices.numpy(), indices_t.numpy())
    assert indices.dtype == mpigrad.int64


@pytest.mark.parametrize("call, message", [
    (lambda L: L.max_pool1d(L_zeros(L, 2, 3, 4, 5), 2), "Expected 2D or 3D"),
    (lambda L: L.avg_pool1d(L_zeros(L, 5), 2), "Expected 2 to 3 dimensions"),
    (lambda L: L.adaptive_max_pool2d(L_zeros(L, 2, 3), 2), "Expected 3D or 4D tensor"),
    (lambda L: L.adaptive_max_pool2d(L_zeros(L, 1, 1, 1, 2, 3), 2), "Expected 3D or 4D tensor"),
    (lambda L: L.adaptive_max_pool1d(L_zeros(L, 1, 2, 3, 3), 2), "Expected 2 to 3 dimensions"),
])
def test_pooling_errors_match_torch(call, message):
    for library in (TF, F):
        with pytest.raises(RuntimeError, match=message):
            call(library)


# ----------------------------------------------------------------------------- normalisation
def _randomised_pair(name, *args, **kwargs):
    """_pair with random affine parameters and running statistics."""
    ours, theirs = _pair(name, *args, **kwargs)
    rng = np.random.default_rng(13)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.tensor(rng.standard_normal(p.shape)))
        if theirs.running_var is not None:
            theirs.running_mean.copy_(torch.tensor(rng.standard_normal(theirs.num_features)))
            theirs.running_var.copy_(torch.tensor(rng.uniform(0.5, 2, theirs.num_features)))
    ours.load_state_dict({k: mpigrad.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("name, kwargs, shape", [
    ("InstanceNorm2d", {}, (2, 3, 4, 5)),
    ("InstanceNorm2d", dict(affine=True), (2, 3, 4, 5)),
    ("InstanceNorm2d", dict(affine=True, bias=False), (2, 3, 4, 5)),
    ("BatchNorm2d", dict(bias=False), (2, 3, 4, 5)),
    ("InstanceNorm2d", dict(affine=True, track_running_stats=True), (2, 3, 4, 5)),
    ("InstanceNorm2d", dict(track_running_stats=True, momentum=None), (3, 4, 5)),
    ("InstanceNorm1d", dict(affine=True, eps=1e-3), (2, 3, 6)),
    ("InstanceNorm1d", dict(track_running_stats=True, momentum=0.3), (3, 6)),
    ("BatchNorm2d", dict(track_running_stats=False), (2, 3, 4, 5)),
    ("BatchNorm1d", dict(track_running_stats=False, affine=False), (4, 3)),
    ("BatchNorm1d", dict(track_running_stats=False), (4, 3, 2)),
])
@pytest.mark.parametrize("training", [True, False])
def test_instance_and_untracked_batch_norm_match_torch(name, kwargs, shape, training):
    ours, theirs = _randomised_pair(name, 3, **kwargs)
    ours.train(training)
    theirs.train(training)
    _check_module_against_torch(ours, theirs, np.random.default_rng(14).standard_normal(shape))
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-12,
                                   atol=1e-12, err_msg=key)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    if not kwargs.get("track_running_stats", name.startswith("Batch")):
        assert ours.running_mean is None and ours.running_var is None


@pytest.mark.parametrize("make, shape, message", [
    (lambda L: L.InstanceNorm2d(3), (2, 3), "expected 3D or 4D input \\(got 2D input\\)"),
    (lambda L: L.InstanceNorm1d(3), (2, 3, 4, 5), "expected 2D or 3D input \\(got 4D input\\)"),
    (lambda L: L.InstanceNorm2d(3, affine=True), (2, 4, 4, 4),
     "expected input's size at dim=1 to match num_features \\(3\\), but got: 4"),
    (lambda L: L.InstanceNorm1d(3), (2, 3, 1), "Expected more than 1 spatial element"),
])
def test_instance_norm_errors_match_torch(make, shape, message):
    for library, zeros in ((torch.nn, torch.zeros), (nn, mpigrad.zeros)):
        with pytest.raises(ValueError, match=message):
            make(library)(zeros(*shape))


def test_instance_norm_warns_for_a_channel_count_it_does_not_use():
    with pytest.warns(UserWarning, match="does not match num_features"):
        torch.nn.InstanceNorm1d(3)(torch.zeros(2, 4, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(3)(mpigrad.zeros(2, 4, 5))


# ----------------------------------------------------------------------------- resampling
@pytest.mark.parametrize("shape, kwargs", [
    ((2, 3, 4, 5), dict(scale_factor=2)),
    ((2, 3, 4, 5), dict(size=(7, 3))),
    ((1, 2, 10, 7), dict(size=(6, 5))),                 # uneven steps
    ((2, 3, 4, 5), dict(scale_factor=(1.5, 0.7))),
    ((2, 3, 4, 5), dict(scale_factor=1.7, recompute_scale_factor=True)),
    ((2, 3, 4, 5), dict(size=(9, 8), mode="nearest-exact")),
    ((2, 3, 4, 5), dict(size=(7, 9), mode="bilinear")),
    ((2, 3, 4, 5), dict(size=(7, 9), mode="bilinear", align_corners=True)),
    ((2, 3, 6, 5), dict(size=(3, 2), mode="bilinear")),
    ((2, 3, 4, 5), dict(scale_factor=2.5, mode="bilinear")),
    ((2, 3, 4, 5), dict(scale_factor=(2.5, 1.3), mode="bilinear", recompute_scale_factor=True)),
    ((2, 3, 4, 5), dict(scale_factor=1.5, mode="bilinear", align_corners=True)),
    ((2, 3, 4, 5), dict(size=1, mode="bilinear", align_corners=True)),
    ((2, 3, 7), dict(size=12, mode="linear")),
    ((2, 3, 7), dict(scale_factor=0.6, mode="linear", align_corners=True)),
    ((2, 3, 7), dict(scale_factor=3)),
    ((1, 2, 3, 4, 2), dict(size=(4, 3, 5), mode="trilinear")),
    ((1, 2, 3, 4, 2), dict(scale_factor=2)),
    ((2, 3, 7, 6), dict(size=(3, 4), mode="area")),
    ((2, 3, 7), dict(size=4, mode="area")),
])
def test_interpolate_matches_torch(shape, kwargs):
    _check_function(lambda x: F.interpolate(x, **kwargs), lambda x: TF.interpolate(x, **kwargs),
                    [shape])


@pytest.mark.parametrize("name, args, kwargs", [
    ("Upsample", (), dict(scale_factor=2)),
    ("Upsample", ((5, 7),), dict(mode="bilinear")),
    ("Upsample", (), dict(scale_factor=(1.5, 2), mode="bilinear", align_corners=True)),
    ("UpsamplingNearest2d", (), dict(scale_factor=3)),
    ("UpsamplingNearest2d", ((4, 9),), {}),
    ("UpsamplingBilinear2d", (), dict(scale_factor=2)),
    ("UpsamplingBilinear2d", ((3, 7),), {}),
])
def test_upsampling_modules_match_torch(name, args, kwargs):
    x = np.random.default_rng(15).standard_normal((2, 3, 4, 5))
    _check_module_against_torch(getattr(nn, name)(*args, **kwargs),
                                getattr(torch.nn, name)(*args, **kwargs), x)


@pytest.mark.parametrize("shape, kwargs, error, message", [
    ((1, 1, 4, 4), dict(size=2, scale_factor=2), ValueError, "only one of size or scale_factor"),
    ((1, 1, 4, 4), {}, ValueError, "either size or scale_factor should be defined"),
    ((1, 1, 4, 4), dict(size=2, align_corners=True), ValueError,
     "align_corners option can only be set with the interpolating modes"),
    ((1, 1, 4), dict(size=2, mode="bilinear"), NotImplementedError,
     "Got 3D input, but bilinear mode needs 4D input"),
    ((1, 1, 4, 4), dict(size=2, mode="linear"), NotImplementedError,
     "Got 4D input, but linear mode needs 3D input"),
    ((1, 1, 4, 4), dict(size=(2, 2, 2)), ValueError,
     "Input and output must have the same number of spatial dimensions"),
    ((1, 1, 4, 4), dict(scale_factor=(2., 2., 2.)), ValueError,
     "Input and scale_factor must have the same number of spatial dimensions"),
    ((1, 1, 4, 4), dict(size=2, recompute_scale_factor=True), ValueError,
     "recompute_scale_factor is not meaningful with an explicit size"),
    ((1, 1, 4, 4), dict(size=2, mode="foo"), NotImplementedError, "Input Error: Only 3D, 4D"),
    ((4, 4), dict(size=2), NotImplementedError, "Input Error: Only 3D, 4D and 5D"),
    ((1, 1, 4, 4), dict(scale_factor=0.1), RuntimeError,
     "Input and output sizes should be greater than 0"),
])
def test_interpolate_errors_match_torch(shape, kwargs, error, message):
    with pytest.raises(error, match=message):
        TF.interpolate(torch.zeros(shape), **kwargs)
    with pytest.raises(error, match=message):
        F.interpolate(mpigrad.zeros(*shape), **kwargs)


# ----------------------------------------------------------------------------- Bilinear
@pytest.mark.parametrize("bias, shapes", [
    (True, [(4, 3), (4, 5)]),
    (False, [(2, 4, 3), (2, 4, 5)]),
    (True, [(3,), (5,)]),
])
def test_bilinear_matches_torch(bias, shapes):
    ours, theirs = _pair("Bilinear", 3, 5, 2, bias=bias)
    rng = np.random.default_rng(16)
    mine, reference = _leaves(rng, *shapes)
    yo, yt = ours(*mine), theirs(*reference)
    _tol(yo, yt)
    g = rng.standard_normal(tuple(yt.shape))
    yo.backward(mpigrad.tensor(g))
    yt.backward(torch.tensor(g))
    for a, b in zip(mine, reference):
        _tol(a.grad, b.grad)
    for (name, po), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        _tol(po.grad, pt.grad, name)
    assert repr(ours) == repr(theirs)
    bound = 1 / np.sqrt(3)
    fresh = nn.Bilinear(3, 5, 200)
    assert np.abs(fresh.weight.detach().numpy()).max() <= bound
    assert np.abs(fresh.weight.detach().numpy()).max() > 0.9 * bound


@pytest.mark.parametrize("shapes, message", [
    ([(2, 3), (3, 4), (5, 3, 4)], "input batch dimensions do not match at dim 0: got 2 and 3"),
    ([(2, 3), (2, 4), (5, 2, 4)], "input1 size does not match weight size: got 3 but expected 2"),
    ([(2, 3), (2, 4), (5, 3, 5)], "input2 size does not match weight size: got 4 but expected 5"),
    ([(2, 3), (2, 4), (5, 3, 4), (4,)],
     "bias size does not match weight size: got 4 but expected 5"),
])
def test_bilinear_errors_match_torch(shapes, message):
    for library, zeros in ((TF, torch.zeros), (F, mpigrad.zeros)):
        with pytest.raises(RuntimeError, match=message):
            library.bilinear(*(zeros(*s) for s in shapes))


# ----------------------------------------------------------------------------- EmbeddingBag
_BAG_INPUT = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("input, offsets, kwargs", [
    (_BAG_INPUT, [0, 3, 3, 7], {}),                         # an empty bag
    (_BAG_INPUT, [0, 2, 11], dict(include_last_offset=True)),
    (_BAG_INPUT, [0, 4, 6], dict(padding_idx=5)),           # padding left out of the bags
    (_BAG_INPUT[:9].reshape(3, 3), None, {}),
    (np.array([[1, 1], [2, 1]]), None, dict(padding_idx=1)),  # a bag of padding only
    (_BAG_INPUT, [0, 5], dict(max_norm=1.5)),
])
def test_embedding_bag_matches_torch(mode, input, offsets, kwargs):
    ours, theirs = _pair("EmbeddingBag", 10, 3, mode=mode, **kwargs)
    # A fresh weight per library: max_norm rescales rows in place.
    weight = np.random.default_rng(17).standard_normal((10, 3))
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(weight))
    ours.load_state_dict({"weight": mpigrad.tensor(weight)})
    args_o = (mpigrad.tensor(input),) + (() if offsets is None else (mpigrad.tensor(offsets),))
    args_t = (torch.tensor(input),) + (() if offsets is None else (torch.tensor(offsets),))
    yo, yt = ours(*args_o), theirs(*args_t)
    _tol(yo, yt)
    g = np.random.default_rng(18).standard_normal(tuple(yt.shape))
    yo.backward(mpigrad.tensor(g))
    yt.backward(torch.tensor(g))
    _tol(ours.weight.grad, theirs.weight.grad)
    _tol(ours.weight, theirs.weight)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("input, offsets", [
    (_BAG_INPUT, [0, 3, 7]),
    (_BAG_INPUT[:8].reshape(2, 4), None),
])
def test_embedding_bag_per_sample_weights_match_torch(input, offsets):
    rng = np.random.default_rng(19)
    extra = () if offsets is None else (offsets,)
    _check_function(
        lambda w, p: F.embedding_bag(mpigrad.tensor(input), w,
                                     *(mpigrad.tensor(o) for o in extra), mode="sum",
                                     per_sample_weights=p),
        lambda w, p: TF.embedding_bag(torch.tensor(input), w, *(torch.tensor(o) for o in extra),
                                      mode="sum", per_sample_weights=p),
        [(10, 4), input.shape], seed=int(rng.integers(100)))


def test_embedding_bag_refuses_scale_grad_by_freq():
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq"):
        nn.EmbeddingBag(4, 2, scale_grad_by_freq=True, mode="sum")(mpigrad.tensor([[1, 2]]))


def test_embedding_bag_from_pretrained_and_init_match_torch():
    weight = np.random.default_rng(20).standard_normal((6, 2))
    ours = nn.EmbeddingBag.from_pretrained(mpigrad.tensor(weight), mode="max")
    theirs = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(weight), mode="max")
    assert not ours.weight.requires_grad
    _tol(ours(mpigrad.tensor([[1, 2], [3, 0]])), theirs(torch.tensor([[1, 2], [3, 0]])))
    fresh = nn.EmbeddingBag(8, 3, padding_idx=-2)
    assert fresh.padding_idx == 6 and not fresh.weight.detach().numpy()[6].any()


@pytest.mark.parametrize("call, error, message", [
    (lambda L, w: L.embedding_bag(T(L, [[1, 2]]), w, T(L, [0])), ValueError,
     "if input is 2D, then offsets has to be None"),
    (lambda L, w: L.embedding_bag(T(L, [[[1]]]), w), ValueError,
     "input has to be 1D or 2D Tensor, but got Tensor of dimension 3"),
    (lambda L, w: L.embedding_bag(T(L, [1, 2]), w), ValueError,
     "offsets has to be a 1D Tensor but got None"),
    (lambda L, w: L.embedding_bag(T(L, [1, 2]), w, T(L, [1])), RuntimeError,
     "offsets\\[0\\] has to be 0"),
    (lambda L, w: L.embedding_bag(T(L, [1, 2]), w, T(L, [0]),
                                  per_sample_weights=T(L, [1., 1.])), NotImplementedError,
     "per_sample_weights is only supported for mode='sum' \\(got mode='mean'\\)"),
    (lambda L, w: L.embedding_bag(T(L, [1, 2]), w, T(L, [0]), mode="sum",
                                  per_sample_weights=T(L, [1., 1., 1.])), ValueError,
     "then it must have the same shape as the input"),
    (lambda L, w: L.embedding_bag(T(L, [1, 2]), w, T(L, [0]), mode="min"), ValueError,
     "mode has to be one of sum, mean or max"),
    (lambda L, w: L.embedding_bag(T(L, [1, 20]), w, T(L, [0])), RuntimeError,
     "Index 1 of input takes value 20 which is not in the valid range \\[0, 10\\)"),
    (lambda L, w: L.embedding_bag(T(L, [1., 2.]), w, T(L, [0])), RuntimeError,
     "Expected tensor for argument #1 'indices' to have one of the following scalar types"),
    (lambda L, w: L.embedding_bag(T(L, [1, 2, 3]), w, T(L, [0, 5])), RuntimeError,
     "offsets\\[-1\\] can not be greater than input's length 3"),
])
def test_embedding_bag_errors_match_torch(call, error, message):
    for library, weight in ((TF, torch.zeros(10, 3)), (F, mpigrad.zeros(10, 3))):
        with pytest.raises(error, match=message):
            call(library, weight)


def T(library, values):
    return (torch if library is TF else mpigrad).tensor(values)


# ------------------------------------------------------------------------ higher order, tangents
@pytest.mark.parametrize("make, shapes", [
    (lambda: nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
     [(1, 2, 3, 2)]),
    (lambda: nn.ConvTranspose1d(2, 2, 2, stride=3, dilation=2), [(1, 2, 3)]),
    (lambda: nn.Conv2d(2, 4, 3, padding=1, groups=2, padding_mode="reflect"), [(1, 2, 3, 4)]),
    (lambda: nn.Conv2d(3, 3, 3, padding="same", groups=3, padding_mode="circular"),
     [(1, 3, 3, 3)]),
    (lambda: nn.ReplicationPad2d((1, 2, 0, 1)), [(1, 2, 2, 3)]),
    (lambda: nn.AdaptiveMaxPool2d((2, 3)), [(1, 2, 4, 5)]),
    (lambda: nn.MaxPool1d(3, 2, 1), [(2, 2, 6)]),
    (lambda: nn.AvgPool1d(3, 2, 1, count_include_pad=False), [(2, 2, 6)]),
    (lambda: nn.InstanceNorm2d(2, affine=True), [(2, 2, 3, 2)]),
    (lambda: nn.Upsample(size=(3, 5), mode="bilinear"), [(1, 2, 2, 3)]),
    (lambda: nn.Upsample(scale_factor=2, mode="nearest"), [(1, 1, 2, 3)]),
    (lambda: nn.Bilinear(2, 3, 2), [(2, 2), (2, 3)]),
])
def test_new_modules_pass_gradcheck_and_gradgradcheck(make, shapes):
    module = make().double()
    rng = np.random.default_rng(21)
    # Distinct values, away from ties: max pooling is differentiable where sampled.
    inputs = [mpigrad.tensor(rng.permutation(np.prod(s)).reshape(s) / np.prod(s)
                             + rng.uniform(0, 1e-3, s), requires_grad=True) for s in shapes]
    # Tangents of the inputs (the module reads its own parameters, not dual copies of them;
    # the ops' CASES cover the parameters' tangents).
    assert gradcheck(lambda *a: module(*a), inputs, check_forward_ad=True,
                     check_backward_ad=False)
    inputs += list(module.parameters())
    count = len(shapes)
    assert gradcheck(lambda *a: module(*a[:count]), inputs)
    assert gradgradcheck(lambda *a: module(*a[:count]), inputs)


def test_embedding_bag_passes_gradcheck_and_gradgradcheck():
    rng = np.random.default_rng(22)
    weight = mpigrad.tensor(rng.standard_normal((6, 2)), requires_grad=True)
    samples = mpigrad.tensor(rng.standard_normal(5), requires_grad=True)
    indices, offsets = mpigrad.tensor([1, 4, 1, 0, 5]), mpigrad.tensor([0, 2])
    for mode in ("mean", "max"):
        bag = lambda w: F.embedding_bag(indices, w, offsets, mode=mode)  # noqa: E731
        assert gradcheck(bag, (weight,), check_forward_ad=True)
        assert gradgradcheck(bag, (weight,))
    weighted = lambda w, p: F.embedding_bag(indices, w, offsets, mode="sum",  # noqa: E731
                                            per_sample_weights=p)
    assert gradcheck(weighted, (weight, samples), check_forward_ad=True)
    assert gradgradcheck(weighted, (weight, samples))


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2), dict(size=(3, 7), align_corners=True)])
def test_bilinear_is_one_op_to_any_order_and_float32_is_torchs(kwargs):
    """Bilinear resampling is one op whose gradient is its adjoint, another op: gradients of
    any order, a node named as torch's, and float32 within torch's float32 tolerance."""
    x = mpigrad.tensor(np.random.default_rng(16).standard_normal((2, 3, 4, 5)),
                       requires_grad=True)
    resample = lambda x: F.interpolate(x, mode="bilinear", **kwargs)
    assert gradcheck(resample, (x,)) and gradgradcheck(resample, (x,))
    data = np.random.default_rng(17).standard_normal((2, 3, 4, 5)).astype(np.float32)
    ours = F.interpolate(mpigrad.tensor(data, requires_grad=True), mode="bilinear", **kwargs)
    theirs = TF.interpolate(torch.tensor(data, requires_grad=True), mode="bilinear", **kwargs)
    assert type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1.3e-6,
                               atol=1e-5)
