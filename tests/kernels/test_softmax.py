"""softmax, log_softmax and class-index cross-entropy: the fused kernels against torch (with
class weights, ignore_index, label smoothing, odd sizes, non-contiguous input, any class
dimension), and gradcheck / gradgradcheck through their rules."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402

from .torch_check import check  # noqa: E402

F = mg.nn.functional
TF = torch.nn.functional
DTYPES = [np.float64, np.float32]


def _scores(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape) * 4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_matches_torch(name, dim, dtype):
    check(lambda x: getattr(F, name)(x, dim), lambda x: getattr(TF, name)(x, dim),
          [_scores((5, 33, 3))], dtype)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_on_strided_and_extreme_rows(name):
    x = _scores((6, 9))
    x[0] = -np.inf
    x[1, 3] = np.inf
    x[2, :4] = -np.inf
    x[3] = 1e300
    with np.errstate(invalid="ignore"):
        ours = getattr(F, name)(mg.tensor(x), 1).numpy()
    np.testing.assert_allclose(ours, getattr(TF, name)(torch.tensor(x), 1).numpy(),
                               rtol=1e-12, equal_nan=True)
    check(lambda x: getattr(F, name)(x.transpose(0, 1)[::2], 0),
          lambda x: getattr(TF, name)(x.transpose(0, 1)[::2], 0), [_scores((6, 9))],
          np.float64)


CROSS_ENTROPY = {
    "plain": {},
    "ignore_index": {"ignore_index": 2},
    "smoothing": {"label_smoothing": 0.15},
    "weights": {"weight": True},
    "all": {"weight": True, "ignore_index": 0, "label_smoothing": 0.3},
}


def _cross_entropy(lib, kwargs, reduction, classes, dtype):
    kwargs = dict(kwargs)
    if kwargs.pop("weight", False):
        weight = np.random.default_rng(5).random(classes) + 0.5
        kwargs["weight"] = lib.tensor(weight.astype(dtype))
    functional = F if lib is mg else TF
    return lambda x, t: functional.cross_entropy(x, t, reduction=reduction, **kwargs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", sorted(CROSS_ENTROPY))
@pytest.mark.parametrize("shape", [(13, 7), (4, 7, 3), (7,)], ids=["NC", "NCd", "C"])
def test_cross_entropy_matches_torch(shape, case, reduction, dtype):
    kwargs = CROSS_ENTROPY[case]
    if len(shape) == 1 and "ignore_index" in kwargs and reduction == "mean":
        kwargs = {k: v for k, v in kwargs.items() if k != "ignore_index"}  # torch: nan or not
    classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    target = np.random.default_rng(1).integers(0, classes, target_shape)
    check(_cross_entropy(mg, kwargs, reduction, classes, dtype),
          _cross_entropy(torch, kwargs, reduction, classes, dtype),
          [_scores(shape), target], dtype)


def test_cross_entropy_on_a_non_contiguous_input_and_every_target_ignored():
    x, target = _scores((7, 10)), np.random.default_rng(2).integers(0, 4, 10)
    check(lambda x, t: F.cross_entropy(x.transpose(0, 1)[:, ::2], t),
          lambda x, t: TF.cross_entropy(x.transpose(0, 1)[:, ::2], t), [x, target],
          np.float64)
    ignored = np.full(4, -100)
    ours = F.cross_entropy(mg.tensor(_scores((4, 3))), mg.tensor(ignored), reduction="sum")
    assert ours.item() == 0.0


def test_cross_entropy_refuses_a_target_out_of_range():
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(mg.tensor(_scores((2, 3))), mg.tensor([0, 3]))


@pytest.mark.parametrize("case", sorted(CROSS_ENTROPY))
def test_cross_entropy_gradcheck_and_gradgradcheck(case):
    fn = _cross_entropy(mg, CROSS_ENTROPY[case], "mean", 4, np.float64)
    target = mg.tensor(np.array([0, 3, 2, 0, 1]))
    x = mg.tensor(_scores((5, 4)) / 4, requires_grad=True)
    assert gradcheck(lambda x: fn(x, target), (x,))
    assert gradgradcheck(lambda x: fn(x, target), (x,))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_gradcheck_and_gradgradcheck(name):
    x = mg.tensor(_scores((3, 5)) / 4, requires_grad=True)
    assert gradcheck(lambda x: getattr(F, name)(x, 1), (x,))
    assert gradgradcheck(lambda x: getattr(F, name)(x, 1), (x,))


def test_float32_cross_entropy_keeps_torchs_float32_accuracy():
    """float32 cross-entropy takes its exponentials in float32 arithmetic, as torch does: per
    row, its loss and gradient are no further from the float64 values than torch's float32
    ones are (twice their largest error, or a few float32 ulps of the row's largest entry),
    over the word LM's class count and scores of a wide range."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 1000)) * np.linspace(0.1, 30, 64)[:, None]).astype(np.float32)
    target = rng.integers(0, 1000, 64)
    g = rng.standard_normal(64).astype(np.float32)
    exact_x = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    exact = TF.cross_entropy(exact_x, torch.tensor(target), reduction="none")
    exact.backward(torch.tensor(g, dtype=torch.float64))
    errors = {}
    for lib, functional in ((mg, F), (torch, TF)):
        scores = lib.tensor(x, requires_grad=True)
        loss = functional.cross_entropy(scores, lib.tensor(target), reduction="none")
        loss.backward(lib.tensor(g))
        assert loss.dtype == lib.float32 and scores.grad.dtype == lib.float32
        errors[lib] = (np.abs(loss.detach().numpy() - exact.detach().numpy()),
                       np.abs(scores.grad.numpy() - exact_x.grad.numpy()).max(1))
    ulp = np.spacing(np.float32(1))
    for ours, theirs, scale in zip(errors[mg], errors[torch],
                                   (exact.detach().numpy(), np.abs(g))):
        assert (ours <= np.maximum(2 * theirs, 4 * ulp * np.maximum(np.abs(scale), 1))).all()
