"""mpigrad.nn.functional's public names, pinned; and its argument errors against torch's.

The rule (docs/architecture.md, nn/_checks.py): for each kind of mistake, the exception type torch
2.13 raises. Each case below makes one representative mistake of a kind on both libraries
(the layers too: built and called, as torch checks some options only when called) and
compares the types; torch must raise, so a case cannot pass by raising nothing.
"""
import types

import numpy as np
import pytest

import mpigrad
import mpigrad.nn.functional as F

# torch.nn.functional's names that mpigrad covers, as before nn/functional.py became a
# package: the package must export exactly these.
PUBLIC = {
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "avg_pool1d", "avg_pool2d", "batch_norm", "bilinear", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "celu", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "cosine_embedding_loss", "cosine_similarity", "cross_entropy",
    "ctc_loss", "dropout", "dropout1d", "dropout2d", "elu", "embedding", "embedding_bag", "fold",
    "gaussian_nll_loss", "gelu", "glu", "group_norm", "hardsigmoid", "hardswish", "hardtanh",
    "hinge_embedding_loss", "huber_loss", "instance_norm", "interpolate", "kl_div", "l1_loss",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "margin_ranking_loss",
    "max_pool1d", "max_pool2d", "mish", "mse_loss", "multi_head_attention_forward",
    "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss", "nll_loss",
    "normalize", "one_hot", "pad", "pairwise_distance", "pixel_shuffle", "pixel_unshuffle",
    "poisson_nll_loss", "prelu", "relu", "relu6", "rms_norm", "scaled_dot_product_attention",
    "selu", "sigmoid", "silu", "smooth_l1_loss", "soft_margin_loss", "softmax", "softplus",
    "softsign", "tanh", "threshold", "triplet_margin_loss", "triplet_margin_with_distance_loss",
    "unfold",
}


def test_the_public_names_are_unchanged():
    assert set(F.__all__) == PUBLIC
    public = {name for name, value in vars(F).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert public == PUBLIC
    assert all(callable(getattr(F, name)) for name in PUBLIC)


def test_every_public_name_is_torchs():
    torch = pytest.importorskip("torch")
    assert PUBLIC <= set(dir(torch.nn.functional))


def _randn(L, *shape, dtype=None):
    values = np.random.default_rng(sum(shape)).standard_normal(shape)
    return L.t.tensor(values, dtype=dtype or L.t.float64)


def _long(L, *values):
    return L.t.tensor(list(values), dtype=L.t.int64)


def _image(L):
    return _randn(L, 2, 3, 5, 5)


def _weight(L):
    return _randn(L, 4, 3, 3, 3)


def _mha(L, embed_dim_to_check):
    x = _randn(L, 2, 1, 4)
    return L.F.multi_head_attention_forward(x, x, x, embed_dim_to_check, 1, _randn(L, 12, 4),
                                            None, None, None, False, 0.0, _randn(L, 4, 4), None)


# name -> a call making one mistake, on the library L (L.t, L.F, L.nn).
MISTAKES = {
    # linear maps: a tensor that does not fit -> RuntimeError
    "linear sizes": lambda L: L.F.linear(_randn(L, 2, 3), _randn(L, 4, 5)),
    "bilinear sizes": lambda L: L.F.bilinear(_randn(L, 2, 3), _randn(L, 2, 4),
                                             _randn(L, 5, 3, 3)),
    # convolution: rank, channels, weight, kernel larger than the input, size options
    "conv2d input rank": lambda L: L.F.conv2d(_randn(L, 3, 5), _weight(L)),
    "conv2d channels": lambda L: L.F.conv2d(_randn(L, 2, 2, 5, 5), _weight(L)),
    "conv2d groups": lambda L: L.F.conv2d(_image(L), _weight(L), groups=0),
    "conv2d kernel too large": lambda L: L.F.conv2d(_randn(L, 1, 3, 2, 2), _weight(L)),
    "conv2d stride 0": lambda L: L.F.conv2d(_image(L), _weight(L), stride=0),
    "conv2d negative padding": lambda L: L.F.conv2d(_image(L), _weight(L), padding=-1),
    "conv2d stride of a str": lambda L: L.F.conv2d(_image(L), _weight(L), stride="a"),
    "conv2d same strided": lambda L: L.F.conv2d(_image(L), _weight(L), padding="same",
                                                stride=2),
    "conv2d dtypes": lambda L: L.F.conv2d(_image(L), _weight(L).float()),
    "conv1d input rank": lambda L: L.F.conv1d(_image(L), _randn(L, 4, 3, 3)),
    "conv_transpose2d input rank": lambda L: L.F.conv_transpose2d(_randn(L, 3, 5), _weight(L)),
    "conv_transpose2d channels": lambda L: L.F.conv_transpose2d(_randn(L, 2, 2, 5, 5),
                                                                _weight(L)),
    "conv_transpose2d stride 0": lambda L: L.F.conv_transpose2d(_image(L), _randn(L, 3, 4, 3, 3),
                                                                stride=0),
    "conv_transpose1d input rank": lambda L: L.F.conv_transpose1d(_image(L),
                                                                  _randn(L, 3, 4, 3)),
    "unfold kernel 0": lambda L: L.F.unfold(_image(L), 0),
    "unfold kernel too large": lambda L: L.F.unfold(_image(L), 7),
    "fold sizes": lambda L: L.F.fold(_randn(L, 1, 5, 4), (3, 3), 2),
    "Conv2d stride 0": lambda L: L.nn.Conv2d(3, 4, 3, stride=0)(_image(L)),
    "Conv2d same strided": lambda L: L.nn.Conv2d(3, 4, 3, stride=2, padding="same"),
    "Conv2d groups": lambda L: L.nn.Conv2d(3, 4, 3, groups=2),
    # pooling
    "max_pool2d input rank": lambda L: L.F.max_pool2d(_randn(L, 5, 5), 2),
    "max_pool2d padding": lambda L: L.F.max_pool2d(_image(L), 2, padding=2),
    "max_pool2d kernel too large": lambda L: L.F.max_pool2d(_image(L), 7),
    "avg_pool2d divisor 0": lambda L: L.F.avg_pool2d(_image(L), 2, divisor_override=0),
    "max_pool1d input rank": lambda L: L.F.max_pool1d(_image(L), 2),
    "adaptive_avg_pool2d input rank": lambda L: L.F.adaptive_avg_pool2d(_randn(L, 3), 2),
    "adaptive_avg_pool2d output size": lambda L: L.F.adaptive_avg_pool2d(_image(L), (1, 2, 3)),
    "adaptive_max_pool2d input rank": lambda L: L.F.adaptive_max_pool2d(_randn(L, 3), 2),
    "MaxPool2d padding": lambda L: L.nn.MaxPool2d(2, padding=2)(_image(L)),
    "AvgPool2d divisor 0": lambda L: L.nn.AvgPool2d(2, divisor_override=0)(_image(L)),
    # activations: a dtype the kernel does not take -> NotImplementedError; an option torch
    # checks in Python -> ValueError; a tensor that does not fit -> RuntimeError
    "softmax of ints": lambda L: L.F.softmax(_long(L, 1, 2), 0),
    "elu of ints": lambda L: L.F.elu(_long(L, 1, 2)),
    "hardtanh bounds": lambda L: L.F.hardtanh(_image(L), 2.0, 1.0),
    "celu alpha 0": lambda L: L.F.celu(_image(L), 0.0),
    "prelu channels": lambda L: L.F.prelu(_image(L), _randn(L, 2)),
    "glu odd size": lambda L: L.F.glu(_randn(L, 3)),
    # dropout
    "dropout probability": lambda L: L.F.dropout(_image(L), 1.5),
    "dropout1d input rank": lambda L: L.F.dropout1d(_image(L)),
    "Dropout probability": lambda L: L.nn.Dropout(1.5),
    # normalisation
    "layer_norm shape": lambda L: L.F.layer_norm(_image(L), (4,)),
    "group_norm groups": lambda L: L.F.group_norm(_image(L), 2),
    "batch_norm running stats": lambda L: L.F.batch_norm(_image(L), L.t.zeros(4, dtype=L.t.float64),
                                                         L.t.ones(4, dtype=L.t.float64)),
    "batch_norm one value": lambda L: L.F.batch_norm(_randn(L, 1, 3), None, None, training=True),
    "batch_norm no running stats": lambda L: L.F.batch_norm(_image(L), None, None),
    "instance_norm one value": lambda L: L.F.instance_norm(_randn(L, 2, 3, 1)),
    "rms_norm shape": lambda L: L.F.rms_norm(_image(L), (4,)),
    "normalize dim": lambda L: L.F.normalize(_randn(L, 2, 3), dim=3),
    # embeddings
    "embedding index": lambda L: L.F.embedding(_long(L, 5), _randn(L, 3, 2)),
    "embedding float indices": lambda L: L.F.embedding(_randn(L, 1), _randn(L, 3, 2)),
    "embedding padding_idx": lambda L: L.F.embedding(_long(L, 1), _randn(L, 3, 2),
                                                     padding_idx=5),
    "Embedding padding_idx": lambda L: L.nn.Embedding(3, 2, padding_idx=5),
    "one_hot float": lambda L: L.F.one_hot(_randn(L, 2)),
    "one_hot class": lambda L: L.F.one_hot(_long(L, 5), 3),
    "embedding_bag mode": lambda L: L.F.embedding_bag(L.t.tensor([[1]]), _randn(L, 3, 2),
                                                      mode="foo"),
    "embedding_bag input rank": lambda L: L.F.embedding_bag(L.t.tensor([[[1]]]),
                                                            _randn(L, 3, 2)),
    # distances
    "pairwise_distance sizes": lambda L: L.F.pairwise_distance(_randn(L, 2, 3), _randn(L, 2, 4)),
    "cosine_similarity sizes": lambda L: L.F.cosine_similarity(_randn(L, 2, 3), _randn(L, 2, 4)),
    # vision
    "pixel_shuffle channels": lambda L: L.F.pixel_shuffle(_image(L), 2),
    "interpolate size and scale": lambda L: L.F.interpolate(_image(L), size=2, scale_factor=2),
    "interpolate input rank": lambda L: L.F.interpolate(_randn(L, 3, 3), size=2),
    # attention
    "sdpa input rank": lambda L: L.F.scaled_dot_product_attention(_randn(L, 3), _randn(L, 3),
                                                                  _randn(L, 3)),
    "mha embedding size": lambda L: _mha(L, 5),
    # losses
    "reduction": lambda L: L.F.l1_loss(_randn(L, 2), _randn(L, 2), reduction="foo"),
    "L1Loss reduction": lambda L: L.nn.L1Loss(reduction="foo")(_randn(L, 2), _randn(L, 2)),
    "mse_loss of ints": lambda L: L.F.mse_loss(_long(L, 1, 2), _long(L, 1, 2)),
    "mse_loss sizes": lambda L: L.F.mse_loss(_randn(L, 2, 3), _randn(L, 2, 4)),
    "huber_loss delta": lambda L: L.F.huber_loss(_randn(L, 2), _randn(L, 2), delta=0.0),
    "cross_entropy weight": lambda L: L.F.cross_entropy(_randn(L, 2, 3), _long(L, 0, 1),
                                                        weight=L.t.ones(4, dtype=L.t.float64)),
    "cross_entropy batch": lambda L: L.F.cross_entropy(_randn(L, 2, 3), _long(L, 0, 1, 2)),
    "nll_loss target": lambda L: L.F.nll_loss(_randn(L, 2, 3), _long(L, 0, 5)),
    "binary_cross_entropy sizes": lambda L: L.F.binary_cross_entropy(
        L.t.full((2, 3), 0.5, dtype=L.t.float64), L.t.full((2, 1), 0.5, dtype=L.t.float64)),
    "triplet margin": lambda L: L.F.triplet_margin_with_distance_loss(
        _randn(L, 2, 3), _randn(L, 2, 3), _randn(L, 2, 3), margin=0.0),
    "multi_margin_loss p": lambda L: L.F.multi_margin_loss(_randn(L, 2, 3), _long(L, 0, 1), p=3),
    "gaussian_nll_loss var": lambda L: L.F.gaussian_nll_loss(_randn(L, 2, 3), _randn(L, 2, 3),
                                                             L.t.ones(3, 2, dtype=L.t.float64)),
    "ctc_loss blank": lambda L: L.F.ctc_loss(_randn(L, 4, 1, 3).log_softmax(2), _long(L, 1),
                                             [4], [1], blank=3),
}


def _raised(call, library):
    try:
        call(library)
    except Exception as error:  # noqa: BLE001 (any type: the point is which)
        return type(error)
    return None


@pytest.fixture(scope="module")
def libraries():
    torch = pytest.importorskip("torch")
    ours = types.SimpleNamespace(t=mpigrad, F=F, nn=mpigrad.nn)
    theirs = types.SimpleNamespace(t=torch, F=torch.nn.functional, nn=torch.nn)
    return ours, theirs


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_an_argument_error_has_torchs_type(libraries, mistake):
    ours, theirs = libraries
    expected = _raised(MISTAKES[mistake], theirs)
    assert expected is not None, f"torch accepts {mistake!r}: not a mistake to compare"
    raised = _raised(MISTAKES[mistake], ours)
    assert raised is expected, f"{mistake}: mpigrad raises {raised}, torch {expected}"
