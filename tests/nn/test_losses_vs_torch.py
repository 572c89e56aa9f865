"""issue 21's losses against torch in float64: every reduction and option, outputs and the
gradients of every input torch differentiates (targets and variances included), kinks and
large magnitudes, torch's errors, the modules' reprs and state, and tangents (forward mode)."""
import types
import warnings

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

REDUCTIONS = ["none", "mean", "sum"]
OURS = types.SimpleNamespace(t=mg, F=F, nn=mg.nn)
THEIRS = types.SimpleNamespace(t=torch, F=TF, nn=torch.nn)


def _assert_same(ours, theirs, what="output"):
    ours = ours.detach().numpy() if hasattr(ours, "detach") else np.asarray(ours)
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-10, atol=1e-10,
                               err_msg=what)


def _compare(ours_fn, theirs_fn, arrays, grads, seed=0):
    """Runs both losses on the same float64 arrays and compares the output, then the
    gradient (from a random seed gradient, so 'none' is checked elementwise too) of every
    argument whose position is in `grads`; non-array arguments pass through unchanged."""
    def tensors(lib, dtype=None):
        out = []
        for i, a in enumerate(arrays):
            if not isinstance(a, np.ndarray):
                out.append(a)
            elif lib is mg:
                out.append(mg.tensor(a, requires_grad=i in grads))
            else:
                out.append(torch.tensor(a, requires_grad=i in grads))
        return out
    ours_in, theirs_in = tensors(mg), tensors(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, expected = ours_fn(*ours_in), theirs_fn(*theirs_in)
    assert tuple(out.shape) == tuple(expected.shape)
    _assert_same(out, expected)
    if not grads:
        return
    seed_grad = np.random.default_rng(seed).uniform(0.5, 1.5, tuple(expected.shape))
    out.backward(mg.tensor(seed_grad))
    expected.backward(torch.tensor(seed_grad))
    for i in grads:
        _assert_same(ours_in[i].grad, theirs_in[i].grad, f"gradient of argument {i}")


# ----------------------------------------------------------------------------- pointwise
def _regression_problem(rng, shape=(4, 5), scale=2.0):
    """Inputs and targets whose differences include 0, +-0.5, +-1 and +-2.5 exactly (the kinks
    of l1, smooth_l1 and huber for the betas and deltas below) beside random ones."""
    target = rng.standard_normal(shape) * scale
    diff = rng.standard_normal(shape) * scale
    diff.flat[:7] = [0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5]
    target.flat[:7] = np.arange(7) - 3.0
    return target + diff, target


POINTWISE = [
    ("l1_loss", {}), ("mse_loss", {}), ("smooth_l1_loss", {}),
    ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0}),
    ("huber_loss", {}), ("huber_loss", {"delta": 2.5}),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name,kwargs", POINTWISE, ids=[f"{n}{k}" for n, k in POINTWISE])
def test_pointwise_losses_match_torch_at_kinks(name, kwargs, reduction, rng):
    x, t = _regression_problem(rng)
    _compare(lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kwargs),
             lambda a, b: getattr(TF, name)(a, b, reduction=reduction, **kwargs),
             [x, t], grads=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["l1_loss", "mse_loss", "huber_loss"])
def test_elementwise_weight_matches_torch(name, reduction, rng):
    x, t = _regression_problem(rng)
    w = rng.uniform(0.1, 2.0, x.shape)
    _compare(lambda a, b, c: getattr(F, name)(a, b, reduction=reduction, weight=c),
             lambda a, b, c: getattr(TF, name)(a, b, reduction=reduction, weight=c),
             [x, t, w], grads=(0, 1, 2))


def test_broadcast_target_warns_and_matches_torch(rng):
    x, t = rng.standard_normal((3, 1)), rng.standard_normal(3)
    for name in ("l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss"):
        with pytest.warns(UserWarning, match="different to the input size"):
            getattr(F, name)(mg.tensor(x), mg.tensor(t))
        _compare(getattr(F, name), getattr(TF, name), [x, t], grads=(0, 1))


@pytest.mark.parametrize("size_average,reduce", [(None, False), (False, None), (True, True),
                                                 (False, False), (True, None)])
def test_legacy_size_average_and_reduce_map_as_in_torch(size_average, reduce, rng):
    x, t = _regression_problem(rng)
    flags = dict(size_average=size_average, reduce=reduce)
    _compare(lambda a, b: F.l1_loss(a, b, **flags), lambda a, b: TF.l1_loss(a, b, **flags),
             [x, t], grads=(0,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch.nn.NLLLoss(**flags).reduction
    with pytest.warns(UserWarning, match=f"please use reduction='{expected}'"):
        assert mg.nn.NLLLoss(**flags).reduction == expected


# ----------------------------------------------------------------------------- binary
def _probabilities(rng, shape, extremes=True):
    p = rng.uniform(0.02, 0.98, shape)
    if extremes:  # the clamped logs: 0, 1, below e^-100, and a hair from each end
        p.flat[:6] = [0.0, 1.0, 1e-50, 1e-13, 1 - 1e-12, 0.5]
    return p


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weight_shape", [None, (5,), (4, 5), (4, 1)])
def test_binary_cross_entropy_matches_torch(weight_shape, reduction, rng):
    x = _probabilities(rng, (4, 5))
    t = rng.uniform(0, 1, (4, 5))
    t.flat[6:9] = [0.0, 1.0, 0.5]
    args = [x, t] + ([] if weight_shape is None else [rng.uniform(0.1, 2, weight_shape)])
    # The target's gradient, log(1 - x) - log(x), is infinite at x = 0 and 1 in both.
    with np.errstate(divide="ignore"):
        _compare(lambda *a: F.binary_cross_entropy(*a, reduction=reduction),
                 lambda *a: TF.binary_cross_entropy(*a, reduction=reduction), args, grads=(0, 1))


def _logits(rng, shape):
    x = rng.standard_normal(shape) * 3
    x.flat[:8] = [-800.0, 800.0, -40.0, 40.0, -1e4, 1e4, 0.0, -20.0]
    return x


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weight_shape", [None, (5,), (4, 5)])
@pytest.mark.parametrize("pos_weight_shape", [None, (5,), (), (4, 5)])
def test_binary_cross_entropy_with_logits_matches_torch_for_large_logits(
        weight_shape, pos_weight_shape, reduction, rng):
    x, t = _logits(rng, (4, 5)), rng.uniform(0, 1, (4, 5))
    t.flat[8:10] = [0.0, 1.0]
    weight = None if weight_shape is None else rng.uniform(0.1, 2, weight_shape)
    pos_weight = None if pos_weight_shape is None else rng.uniform(0.1, 4, pos_weight_shape)

    def call(f, wrap):
        return lambda a, b: f(a, b, None if weight is None else wrap(weight),
                              pos_weight=None if pos_weight is None else wrap(pos_weight),
                              reduction=reduction)
    _compare(call(F.binary_cross_entropy_with_logits, mg.tensor),
             call(TF.binary_cross_entropy_with_logits, torch.tensor), [x, t], grads=(0, 1))


def test_bce_with_logits_module_broadcasts_pos_weight_over_classes(rng):
    x, t = _logits(rng, (6, 3)), (rng.uniform(size=(6, 3)) > 0.5).astype(float)
    pos_weight = np.array([1.0, 3.0, 0.5])
    ours = mg.nn.BCEWithLogitsLoss(pos_weight=mg.tensor(pos_weight))
    theirs = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pos_weight))
    _compare(ours, theirs, [x, t], grads=(0, 1))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["pos_weight"]


# ----------------------------------------------------------------------------- kl_div
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("shape", [(4, 5), (3, 2, 4), (5,)])
def test_kl_div_matches_torch(shape, log_target, reduction, rng):
    scores = rng.standard_normal(shape)
    log_probs = scores - np.log(np.exp(scores).sum(-1, keepdims=True))
    target = rng.dirichlet(np.ones(shape[-1]), shape[:-1])
    if log_target:
        target = np.log(target)
    _compare(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target),
             lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=log_target),
             [log_probs, target], grads=(0, 1))


def test_kl_div_zero_targets_contribute_nothing(rng):
    # torch's target gradient is 0/0 there; the input's gradient is what both define.
    log_probs = np.log(rng.dirichlet(np.ones(4), 3))
    target = rng.dirichlet(np.ones(4), 3)
    target[:, 1] = 0.0
    _compare(lambda a, b: F.kl_div(a, b, reduction="batchmean"),
             lambda a, b: TF.kl_div(a, b, reduction="batchmean"), [log_probs, target],
             grads=(0,))


def test_kl_div_mean_warns_as_torch_does():
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(mg.zeros(2, 3), mg.ones(2, 3) / 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.kl_div(mg.zeros(2, 3), mg.ones(2, 3) / 3, reduction="batchmean")
        mg.nn.KLDivLoss(reduction="batchmean", log_target=True)(mg.zeros(2, 3), mg.zeros(2, 3))


# ----------------------------------------------------------------------------- class scores
def _class_problem(rng, shape, classes, ignore_index):
    """Scores (N, C, d1, ...) (or (C,) when shape is ()) and int64 targets, some of them
    ignore_index when it is not None."""
    scores_shape = (classes,) if shape == () else (shape[0], classes) + shape[1:]
    scores = rng.standard_normal(scores_shape) * 2
    target = rng.integers(0, classes, shape)
    if ignore_index is not None and target.ndim:
        target.flat[::3] = ignore_index
    return scores, target


SHAPES = [(), (6,), (3, 2), (2, 3, 2)]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.15, -0.1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, -100, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cross_entropy_class_targets_every_combination(shape, ignore_index, weighted, smoothing,
                                                       reduction, rng):
    scores, target = _class_problem(rng, shape, 4, ignore_index)
    weight = rng.uniform(0.2, 3, 4) if weighted else None
    kwargs = dict(reduction=reduction, label_smoothing=smoothing,
                  ignore_index=-100 if ignore_index is None else ignore_index)

    def call(f, wrap):
        return lambda a, b: f(a, b, None if weight is None else wrap(weight), **kwargs)
    _compare(call(F.cross_entropy, mg.tensor), call(TF.cross_entropy, torch.tensor),
             [scores, target], grads=(0,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3, -0.1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cross_entropy_probability_targets_every_combination(shape, weighted, smoothing,
                                                             reduction, rng):
    scores, _ = _class_problem(rng, shape, 4, None)
    probs = rng.dirichlet(np.ones(4), shape)
    probs = np.moveaxis(probs, -1, 0 if shape == () else 1).copy()
    weight = rng.uniform(0.2, 3, 4) if weighted else None

    def call(f, wrap):
        return lambda a, b: f(a, b, None if weight is None else wrap(weight),
                              reduction=reduction, label_smoothing=smoothing)
    # torch differentiates probability targets too.
    _compare(call(F.cross_entropy, mg.tensor), call(TF.cross_entropy, torch.tensor),
             [scores, probs], grads=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, -1, 0])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nll_loss_on_n_d_inputs(shape, ignore_index, weighted, reduction, rng):
    scores, target = _class_problem(rng, shape, 5, ignore_index)
    weight = rng.uniform(0.2, 3, 5) if weighted else None
    kwargs = dict(reduction=reduction, ignore_index=-100 if ignore_index is None else ignore_index)
    ours = mg.nn.NLLLoss(None if weight is None else mg.tensor(weight), **kwargs)
    theirs = torch.nn.NLLLoss(None if weight is None else torch.tensor(weight), **kwargs)
    _compare(lambda a, b: ours(mg.nn.functional.log_softmax(a, 0 if a.ndim == 1 else 1), b),
             lambda a, b: theirs(TF.log_softmax(a, 0 if a.ndim == 1 else 1), b),
             [scores, target], grads=(0,))


@pytest.mark.parametrize("name", ["nll_loss", "cross_entropy"])
def test_unbatched_scores_take_a_target_of_shape_one_as_in_torch(name, rng):
    # Forward only: torch's own backward refuses this pair ("size mismatch"); ours runs.
    _compare(lambda a, b: getattr(F, name)(a, b, reduction="none"),
             lambda a, b: getattr(TF, name)(a, b, reduction="none"),
             [rng.standard_normal(4), np.array([2])], grads=())


def test_bce_with_logits_pos_weight_per_channel_of_an_image(rng):
    x, t = _logits(rng, (2, 3, 4, 4)), rng.uniform(0, 1, (2, 3, 4, 4))
    pos_weight = rng.uniform(0.5, 3, (3, 1, 1))  # torch's recipe: one weight per channel
    _compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b,
                                                             pos_weight=mg.tensor(pos_weight)),
             lambda a, b: TF.binary_cross_entropy_with_logits(a, b,
                                                              pos_weight=torch.tensor(pos_weight)),
             [x, t], grads=(0, 1))


def test_cross_entropy_every_target_ignored_is_nan_for_mean_as_in_torch(rng):
    scores = rng.standard_normal((3, 4))
    with np.errstate(invalid="ignore"):  # 0 / 0
        ours = F.cross_entropy(mg.tensor(scores), mg.tensor([-100, -100, -100]))
    assert np.isnan(ours.item())
    assert np.isnan(TF.cross_entropy(torch.tensor(scores), torch.tensor([-100] * 3)).item())


# ----------------------------------------------------------------------------- embeddings
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.3, -0.2])
def test_cosine_embedding_loss_matches_torch(margin, reduction, rng):
    x1, x2 = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    x2[0] = 0.0  # a zero vector: torch's 1e-12 keeps cos finite
    target = np.array([1, -1, 1, -1, -1, 0])  # a target other than +-1 contributes 0
    _compare(lambda a, b, c: F.cosine_embedding_loss(a, b, c, margin, reduction=reduction),
             lambda a, b, c: TF.cosine_embedding_loss(a, b, c, margin, reduction=reduction),
             [x1, x2, target], grads=(0, 1))


@pytest.mark.parametrize("target", [1, -1])
def test_cosine_embedding_loss_unbatched(target, rng):
    x1, x2 = rng.standard_normal(5), rng.standard_normal(5)
    _compare(lambda a, b, c: F.cosine_embedding_loss(a, b, c, margin=-0.5),
             lambda a, b, c: TF.cosine_embedding_loss(a, b, c, margin=-0.5),
             [x1, x2, np.array(target)], grads=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.5])
def test_margin_ranking_loss_matches_torch_with_target_gradient(margin, reduction, rng):
    x1, x2 = rng.standard_normal(8), rng.standard_normal(8)
    target = rng.choice([-1.0, 1.0], 8)
    _compare(lambda a, b, c: F.margin_ranking_loss(a, b, c, margin, reduction=reduction),
             lambda a, b, c: TF.margin_ranking_loss(a, b, c, margin, reduction=reduction),
             [x1, x2, target], grads=(0, 1, 2))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("p,eps", [(2.0, 1e-6), (1.0, 1e-6), (3.0, 0.1), (1.5, 1e-6),
                                   (float("inf"), 1e-6)])
@pytest.mark.parametrize("shape", [(6, 4), (4,)], ids=str)
def test_triplet_margin_loss_matches_torch(shape, p, eps, swap, reduction, rng):
    a, pos, neg = (rng.standard_normal(shape) for _ in range(3))
    options = dict(margin=1.5, p=p, eps=eps, swap=swap, reduction=reduction)
    _compare(lambda x, y, z: F.triplet_margin_loss(x, y, z, **options),
             lambda x, y, z: TF.triplet_margin_loss(x, y, z, **options),
             [a, pos, neg], grads=(0, 1, 2))


def test_triplet_margin_loss_swap_takes_the_closer_negative(rng):
    a, pos = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    neg = pos + 0.1 * rng.standard_normal((5, 3))  # near the positive: swap picks d(p, n)
    ours = F.triplet_margin_loss(mg.tensor(a), mg.tensor(pos), mg.tensor(neg), swap=True)
    plain = F.triplet_margin_loss(mg.tensor(a), mg.tensor(pos), mg.tensor(neg))
    assert ours.item() > plain.item()
    _compare(lambda x, y, z: F.triplet_margin_loss(x, y, z, swap=True),
             lambda x, y, z: TF.triplet_margin_loss(x, y, z, swap=True), [a, pos, neg],
             grads=(0, 1, 2))


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, float("inf"), -float("inf"), 0.0, -1.0])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((5,), (5,))], ids=str)
def test_pairwise_distance_matches_torch(shapes, p, keepdim, rng):
    x1, x2 = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    # p = 0 counts nonzeros: torch leaves its inputs without a gradient, ours get zeros.
    _compare(lambda a, b: F.pairwise_distance(a, b, p, 1e-6, keepdim),
             lambda a, b: TF.pairwise_distance(a, b, p, 1e-6, keepdim), [x1, x2],
             grads=() if p == 0 else (0, 1))


def _cosine_distance(lib):
    return lambda x, y: 1 - lib.cosine_similarity(x, y, dim=-1)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("distance", ["default", "cosine"])
def test_triplet_margin_with_distance_loss_matches_torch(distance, swap, reduction, rng):
    a, pos, neg = (rng.standard_normal((5, 3)) for _ in range(3))

    def call(f, lib):
        function = None if distance == "default" else _cosine_distance(lib)
        return lambda x, y, z: f(x, y, z, distance_function=function, margin=0.7, swap=swap,
                                 reduction=reduction)
    _compare(call(F.triplet_margin_with_distance_loss, F),
             call(TF.triplet_margin_with_distance_loss, TF), [a, pos, neg], grads=(0, 1, 2))
    _compare(mg.nn.TripletMarginWithDistanceLoss(margin=0.7, swap=swap, reduction=reduction),
             torch.nn.TripletMarginWithDistanceLoss(margin=0.7, swap=swap, reduction=reduction),
             [a, pos, neg], grads=(0, 1, 2))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_soft_margin_loss_matches_torch(reduction, rng):
    x, target = rng.standard_normal((4, 5)) * 3, rng.choice([-1.0, 1.0], (4, 5))
    _compare(lambda a, b: F.soft_margin_loss(a, b, reduction=reduction),
             lambda a, b: TF.soft_margin_loss(a, b, reduction=reduction), [x, target],
             grads=(0,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [1.0, 0.4])
def test_hinge_embedding_loss_matches_torch(margin, reduction, rng):
    x = rng.standard_normal((4, 5))
    target = rng.choice([-1.0, 1.0], (4, 5))
    target[0, 0] = 0.0  # neither 1 nor -1: torch counts both parts
    _compare(lambda a, b: F.hinge_embedding_loss(a, b, margin, reduction=reduction),
             lambda a, b: TF.hinge_embedding_loss(a, b, margin, reduction=reduction),
             [x, target], grads=(0,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weight_shape", [None, (5,), (4, 5)])
def test_multilabel_soft_margin_loss_matches_torch(weight_shape, reduction, rng):
    x, target = _logits(rng, (4, 5)), rng.uniform(0, 1, (4, 5))
    target[0] = [0.0, 1.0, 1.0, 0.0, 1.0]
    args = [x, target] + ([] if weight_shape is None else [rng.uniform(0.2, 2, weight_shape)])
    _compare(lambda *a: F.multilabel_soft_margin_loss(*a, reduction=reduction),
             lambda *a: TF.multilabel_soft_margin_loss(*a, reduction=reduction), args,
             grads=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("p,margin", [(1, 1.0), (2, 1.0), (1, 0.3), (2, 2.5)])
@pytest.mark.parametrize("batched", [True, False])
def test_multi_margin_loss_matches_torch(batched, p, margin, weighted, reduction, rng):
    x = rng.standard_normal((6, 4) if batched else (4,))
    target = rng.integers(0, 4, 6 if batched else ())
    weight = rng.uniform(0.2, 2, 4) if weighted else None

    def call(f, wrap):
        return lambda a, b: f(a, b, p, margin, None if weight is None else wrap(weight),
                              reduction=reduction)
    _compare(call(F.multi_margin_loss, mg.tensor), call(TF.multi_margin_loss, torch.tensor),
             [x, target], grads=(0,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss_matches_torch(reduction, rng):
    x = rng.standard_normal((5, 4))
    # Targets first, ended by -1; what follows a -1 is ignored; a class may repeat.
    target = np.array([[0, 1, -1, 2], [3, 3, -1, 0], [-1, 0, 1, 2], [2, 0, 3, 1], [1, -1, -1, 3]])
    _compare(lambda a, b: F.multilabel_margin_loss(a, b, reduction=reduction),
             lambda a, b: TF.multilabel_margin_loss(a, b, reduction=reduction), [x, target],
             grads=(0,))
    _compare(lambda a, b: F.multilabel_margin_loss(a, b, reduction=reduction),
             lambda a, b: TF.multilabel_margin_loss(a, b, reduction=reduction),
             [x[0], np.array([3, 1, -1, 0])], grads=(0,))


def _ctc_problem(rng, blank, concatenated, impossible=False):
    """Scores (T=7, N=4, C=5) and targets of lengths 3, 0, 2, 4 (repeats included) over input
    lengths 7, 3, 5, 7; with `impossible`, the last sample gets too few frames for its labels
    (a repeated label needs a blank between its copies)."""
    scores = rng.standard_normal((7, 4, 5)) * 2
    labels = [c for c in range(5) if c != blank]
    rows = [[labels[0], labels[1], labels[1]], [], [labels[3], labels[2]],
            [labels[2], labels[2], labels[0], labels[2]]]
    input_lengths, target_lengths = [7, 3, 5, 4 if impossible else 7], [len(r) for r in rows]
    if concatenated:
        targets = np.array([c for r in rows for c in r])
    else:
        targets = np.full((4, 5), blank)
        for n, r in enumerate(rows):
            targets[n, :len(r)] = r
    return scores, targets, np.array(input_lengths), np.array(target_lengths)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("concatenated", [False, True])
@pytest.mark.parametrize("blank", [0, 4])
@pytest.mark.parametrize("through_log_softmax", [True, False])
def test_ctc_loss_matches_torch(through_log_softmax, blank, concatenated, zero_infinity,
                                reduction, rng):
    scores, targets, input_lengths, target_lengths = _ctc_problem(rng, blank, concatenated)

    def call(f, lib):
        def loss(x, *rest):
            # A leaf of log-probabilities shows torch's convention: its gradient is the one
            # for logits under a log_softmax, exp(log_probs) above the true one.
            log_probs = lib.log_softmax(x, 2) if through_log_softmax else x
            return f(log_probs, *rest, blank=blank, reduction=reduction,
                     zero_infinity=zero_infinity)
        return loss
    if not through_log_softmax:
        scores = scores - np.log(np.exp(scores).sum(2, keepdims=True))
    _compare(call(F.ctc_loss, F), call(TF.ctc_loss, TF),
             [scores, targets, input_lengths, target_lengths], grads=(0,))


def test_ctc_loss_impossible_alignments_are_infinite_or_zeroed(rng):
    scores, targets, input_lengths, target_lengths = _ctc_problem(rng, 0, False, True)
    args = [scores, targets, input_lengths, target_lengths]
    _compare(lambda *a: F.ctc_loss(F.log_softmax(a[0], 2), *a[1:], reduction="none"),
             lambda *a: TF.ctc_loss(TF.log_softmax(a[0], 2), *a[1:], reduction="none"), args,
             grads=())
    assert np.isinf(F.ctc_loss(mg.tensor(scores).log_softmax(2), *map(mg.tensor, args[1:]),
                               reduction="none").numpy()[3])
    for reduction in REDUCTIONS:
        _compare(lambda *a: F.ctc_loss(F.log_softmax(a[0], 2), *a[1:], reduction=reduction,
                                       zero_infinity=True),
                 lambda *a: TF.ctc_loss(TF.log_softmax(a[0], 2), *a[1:], reduction=reduction,
                                        zero_infinity=True), args, grads=(0,))


def test_ctc_loss_unbatched_and_module_with_lengths_as_tuples(rng):
    scores = rng.standard_normal((6, 4))
    for reduction in REDUCTIONS:
        _compare(lambda x, t: F.ctc_loss(F.log_softmax(x, 1), t, mg.tensor(6), mg.tensor(3),
                                         reduction=reduction),
                 lambda x, t: TF.ctc_loss(TF.log_softmax(x, 1), t, torch.tensor(6),
                                          torch.tensor(3), reduction=reduction),
                 [scores, np.array([1, 3, 3])], grads=(0,))
    scores, targets, input_lengths, target_lengths = _ctc_problem(rng, 2, True)
    _compare(lambda x, t: mg.nn.CTCLoss(blank=2)(F.log_softmax(x, 2), t, tuple(input_lengths),
                                                 tuple(target_lengths)),
             lambda x, t: torch.nn.CTCLoss(blank=2)(TF.log_softmax(x, 2), t,
                                                    tuple(input_lengths), tuple(target_lengths)),
             [scores, targets], grads=(0,))


# ----------------------------------------------------------------------------- likelihoods
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("var_shape", [(4, 3, 5), (4, 3), (4, 3, 1), (4, 1, 5), (1, 3, 5)],
                         ids=str)
def test_gaussian_nll_loss_matches_torch_with_variance_gradient(var_shape, full, reduction, rng):
    x, t = rng.standard_normal((4, 3, 5)), rng.standard_normal((4, 3, 5))
    var = rng.uniform(0.1, 2.0, var_shape)
    var.flat[:2] = [1e-9, 0.0]  # below eps: clamped, the gradient passing the clamp
    _compare(lambda a, b, c: F.gaussian_nll_loss(a, b, c, full=full, reduction=reduction),
             lambda a, b, c: TF.gaussian_nll_loss(a, b, c, full=full, reduction=reduction),
             [x, t, var], grads=(0, 1, 2))


def test_gaussian_nll_loss_float_variance_and_module(rng):
    x, t = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    _compare(lambda a, b: F.gaussian_nll_loss(a, b, 0.7, eps=0.01),
             lambda a, b: TF.gaussian_nll_loss(a, b, 0.7, eps=0.01), [x, t], grads=(0, 1))
    var = rng.uniform(0.0, 0.2, 4)
    _compare(mg.nn.GaussianNLLLoss(full=True, eps=0.05, reduction="sum"),
             torch.nn.GaussianNLLLoss(full=True, eps=0.05, reduction="sum"), [x, t, var],
             grads=(0, 1, 2))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("log_input,eps", [(True, 1e-8), (False, 1e-8), (False, 0.5)])
def test_poisson_nll_loss_matches_torch(log_input, eps, full, reduction, rng):
    x = rng.standard_normal((4, 5)) if log_input else rng.uniform(0.0, 3.0, (4, 5))
    target = rng.poisson(2.0, (4, 5)).astype(float)
    target.flat[:4] = [0.0, 1.0, 2.0, 7.0]  # the Stirling term starts above 1
    target.flat[4] = 1.5
    options = dict(log_input=log_input, full=full, eps=eps, reduction=reduction)
    # At t = 0 with full=True both give a NaN target gradient (0 * log 0 from the masked term).
    with np.errstate(divide="ignore", invalid="ignore"):
        _compare(lambda a, b: F.poisson_nll_loss(a, b, **options),
                 lambda a, b: TF.poisson_nll_loss(a, b, **options), [x, target], grads=(0, 1))


# ----------------------------------------------------------------------------- errors
def _f(L, *shape, low=0.2, high=0.8):
    return L.t.tensor(np.random.default_rng(0).uniform(low, high, shape))


def _i(L, values):
    return L.t.tensor(np.array(values, dtype=np.int64))


ERRORS = {
    "l1 shapes": lambda L: L.F.l1_loss(_f(L, 3), _f(L, 2)),
    "l1 long mean": lambda L: L.F.l1_loss(_i(L, [1, 2]), _i(L, [1, 3])),
    "mse long": lambda L: L.F.mse_loss(_i(L, [1, 2]), _i(L, [1, 3])),
    "mse weight shape": lambda L: L.F.mse_loss(_f(L, 3), _f(L, 3), weight=_f(L, 1)),
    "smooth_l1 negative beta": lambda L: L.F.smooth_l1_loss(_f(L, 3), _f(L, 3), beta=-1.0),
    "huber zero delta": lambda L: L.F.huber_loss(_f(L, 3), _f(L, 3), delta=0.0),
    "huber long": lambda L: L.F.huber_loss(_i(L, [1, 2]), _i(L, [1, 3])),
    "bad reduction": lambda L: L.F.l1_loss(_f(L, 3), _f(L, 3), reduction="bad"),
    "bad module reduction": lambda L: L.nn.MSELoss(reduction="batchmean")(_f(L, 3), _f(L, 3)),
    "bce shapes": lambda L: L.F.binary_cross_entropy(_f(L, 3), _f(L, 2)),
    "bce input range": lambda L: L.F.binary_cross_entropy(_f(L, 3, low=1, high=2), _f(L, 3)),
    "bce target range": lambda L: L.F.binary_cross_entropy(_f(L, 3), _f(L, 3, low=-2, high=-1)),
    "bce long target": lambda L: L.F.binary_cross_entropy(_f(L, 2), _i(L, [1, 0])),
    "bce logits shapes": lambda L: L.F.binary_cross_entropy_with_logits(_f(L, 3), _f(L, 2)),
    "bce logits long target": lambda L: L.F.binary_cross_entropy_with_logits(_f(L, 2),
                                                                             _i(L, [1, 0])),
    "kl_div shapes": lambda L: L.F.kl_div(_f(L, 3), _f(L, 2), reduction="sum"),
    "kl_div reduction": lambda L: L.F.kl_div(_f(L, 3), _f(L, 3), reduction="bad"),
    "nll batch": lambda L: L.F.nll_loss(_f(L, 3, 4), _i(L, [0, 1])),
    "nll bounds": lambda L: L.F.nll_loss(_f(L, 3, 4), _i(L, [0, 1, 7])),
    "nll negative": lambda L: L.F.nll_loss(_f(L, 3, 4), _i(L, [0, -3, 1])),
    "nll float target": lambda L: L.F.nll_loss(_f(L, 3, 4), _f(L, 3)),
    "nll n-d target": lambda L: L.F.nll_loss(_f(L, 3, 4, 5), _i(L, np.zeros((3, 4)))),
    "nll 4-d target": lambda L: L.F.nll_loss(_f(L, 3, 4, 5, 6), _i(L, np.zeros((3, 5, 5)))),
    "nll multi-target": lambda L: L.F.nll_loss(_f(L, 3, 4), _i(L, np.zeros((3, 2)))),
    "nll weight": lambda L: L.F.nll_loss(_f(L, 3, 4), _i(L, [0, 1, 2]), weight=_f(L, 3)),
    "nll scalar": lambda L: L.F.nll_loss(_f(L), _i(L, 0)),
    "nll 0-d target": lambda L: L.F.nll_loss(_f(L, 2, 4), _i(L, 2)),
    "ce float class target": lambda L: L.F.cross_entropy(_f(L, 3, 4), _f(L, 3)),
    "ce smoothing": lambda L: L.F.cross_entropy(_f(L, 3, 4), _i(L, [0, 1, 2]),
                                                label_smoothing=1.5),
    "ce module smoothing": lambda L: L.nn.CrossEntropyLoss(label_smoothing=1.01)(
        _f(L, 3, 4), _i(L, [0, 1, 2])),
    "ce prob ignore_index": lambda L: L.F.cross_entropy(_f(L, 3, 4), _f(L, 3, 4),
                                                        ignore_index=1),
    "ce prob weight": lambda L: L.F.cross_entropy(_f(L, 3, 4), _f(L, 3, 4), weight=_f(L, 3)),
    "ce long scores": lambda L: L.F.cross_entropy(_i(L, [[0, 1, 7]]), _i(L, [0])),
    "cosine target dims": lambda L: L.F.cosine_embedding_loss(_f(L, 3, 4), _f(L, 3, 4),
                                                              _i(L, np.ones((3, 1)))),
    "cosine input dims": lambda L: L.F.cosine_embedding_loss(_f(L, 3, 4), _f(L, 3, 4),
                                                             _i(L, 1)),
    "cosine shapes": lambda L: L.F.cosine_embedding_loss(_f(L, 3, 4), _f(L, 3, 5),
                                                         _i(L, [1, 1, 1])),
    "ranking dims": lambda L: L.F.margin_ranking_loss(_f(L, 3), _f(L, 3, 1), _f(L, 3)),
    "ranking shapes": lambda L: L.F.margin_ranking_loss(_f(L, 3), _f(L, 2), _f(L, 3)),
    "triplet dims": lambda L: L.F.triplet_margin_loss(_f(L, 3, 4), _f(L, 3, 4), _f(L, 4)),
    "triplet margin": lambda L: L.F.triplet_margin_loss(_f(L, 3, 4), _f(L, 3, 4), _f(L, 3, 4),
                                                        margin=0.0),
    "triplet shapes": lambda L: L.F.triplet_margin_loss(_f(L, 3, 4), _f(L, 3, 5), _f(L, 3, 4)),
    "gaussian var shape": lambda L: L.F.gaussian_nll_loss(_f(L, 3, 4), _f(L, 3, 4),
                                                          _f(L, 3, 2)),
    "gaussian negative var": lambda L: L.F.gaussian_nll_loss(_f(L, 3, 4), _f(L, 3, 4),
                                                             -_f(L, 3, 4)),
    "gaussian negative float var": lambda L: L.F.gaussian_nll_loss(_f(L, 3), _f(L, 3), -1.0),
    "gaussian reduction": lambda L: L.F.gaussian_nll_loss(_f(L, 3), _f(L, 3), _f(L, 3),
                                                          reduction="x"),
    "poisson reduction": lambda L: L.F.poisson_nll_loss(_f(L, 3), _f(L, 3), reduction="x"),
    "poisson shapes": lambda L: L.F.poisson_nll_loss(_f(L, 3, 4), _f(L, 3, 3)),
    "pairwise shapes": lambda L: L.F.pairwise_distance(_f(L, 3, 4), _f(L, 3, 3)),
    "with distance margin": lambda L: L.F.triplet_margin_with_distance_loss(
        _f(L, 3), _f(L, 3), _f(L, 3), margin=0.0),
    "with distance module margin": lambda L: L.nn.TripletMarginWithDistanceLoss(margin=-1.0),
    "with distance reduction": lambda L: L.F.triplet_margin_with_distance_loss(
        _f(L, 3), _f(L, 3), _f(L, 3), reduction="bad"),
    "with distance dims": lambda L: L.F.triplet_margin_with_distance_loss(
        _f(L, 2, 3), _f(L, 2, 3), _f(L, 3)),
    "soft margin shapes": lambda L: L.F.soft_margin_loss(_f(L, 3, 4), _f(L, 3, 3)),
    "hinge shapes": lambda L: L.F.hinge_embedding_loss(_f(L, 3, 4), _f(L, 3, 3)),
    "multilabel soft shapes": lambda L: L.F.multilabel_soft_margin_loss(_f(L, 3, 4),
                                                                        _f(L, 3, 3)),
    "multilabel soft reduction": lambda L: L.F.multilabel_soft_margin_loss(
        _f(L, 3, 4), _f(L, 3, 4), reduction="x"),
    "multi margin batch": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _i(L, [0, 1])),
    "multi margin range": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _i(L, [0, 1, 4])),
    "multi margin negative": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _i(L, [0, -1, 1])),
    "multi margin float": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _f(L, 3)),
    "multi margin p": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _i(L, [0, 1, 2]), p=3),
    "multi margin weight dims": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _i(L, [0, 1, 2]),
                                                                weight=_f(L, 2, 2)),
    "multi margin weight size": lambda L: L.F.multi_margin_loss(_f(L, 3, 4), _i(L, [0, 1, 2]),
                                                                weight=_f(L, 3)),
    "multi margin module weight": lambda L: L.nn.MultiMarginLoss(weight=_f(L, 2, 2)),
    "multi margin module p": lambda L: L.nn.MultiMarginLoss(p=3),
    "multi margin 3-d": lambda L: L.F.multi_margin_loss(_f(L, 2, 3, 4), _i(L, [0, 1])),
    "multilabel margin shapes": lambda L: L.F.multilabel_margin_loss(_f(L, 3, 4),
                                                                     _i(L, [[0, 1, -1]] * 3)),
    "multilabel margin range": lambda L: L.F.multilabel_margin_loss(
        _f(L, 3, 4), _i(L, [[0, 1, 5, -1]] * 3)),
    "multilabel margin float": lambda L: L.F.multilabel_margin_loss(_f(L, 3, 4), _f(L, 3, 4)),
    "ctc input length": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [[1, 2], [3, 0]]),
                                               _i(L, [6, 4]), _i(L, [2, 1])),
    "ctc target width": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [[1, 2], [3, 0]]),
                                               _i(L, [5, 4]), _i(L, [3, 1])),
    "ctc negative length": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [[1, 2], [3, 0]]),
                                                  _i(L, [5, 4]), _i(L, [-1, 1])),
    "ctc batch": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [[1, 2], [3, 0]]),
                                        _i(L, [5, 4, 3]), _i(L, [2, 1])),
    "ctc blank": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [[1, 2], [3, 0]]),
                                        _i(L, [5, 4]), _i(L, [2, 1]), blank=4),
    "ctc concatenated size": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [1, 2, 3]),
                                                    _i(L, [5, 4]), _i(L, [2, 2])),
    "ctc float lengths": lambda L: L.F.ctc_loss(_f(L, 5, 2, 4), _i(L, [[1, 2], [3, 0]]),
                                                _f(L, 2), _i(L, [2, 1])),
}


def _raised(call, L):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call(L)
        except Exception as error:  # the exception's type is what is compared
            return type(error), str(error)
    return None, ""


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_have_torchs_type(name):
    expected, _ = _raised(ERRORS[name], THEIRS)
    assert expected is not None, f"{name}: torch accepts this"
    raised, message = _raised(ERRORS[name], OURS)
    assert raised is expected, f"{name}: mpigrad raised {raised} ({message}), torch {expected}"


def test_error_messages_name_the_problem():
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(mg.randn(3, 4), mg.tensor([0, 1, 7]))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target "
                                         r"batch_size \(2\)"):
        F.nll_loss(mg.randn(3, 4), mg.tensor([0, 1]))
    with pytest.raises(RuntimeError, match=r"Expected target size \[3, 5\], got \[3, 4\]"):
        F.nll_loss(mg.randn(3, 4, 5), mg.zeros(3, 4, dtype=mg.int64))
    with pytest.raises(RuntimeError, match="defined either for all 4 classes or no classes"):
        F.cross_entropy(mg.randn(3, 4), mg.tensor([0, 1, 2]), mg.ones(3))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(mg.randn(3, 4), mg.randn(3, 4), mg.ones(3, 2))
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(mg.tensor([1.5]), mg.tensor([0.5]))
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match the size of "
                                           r"tensor b \(2\) at non-singleton dimension 0"), \
            pytest.warns(UserWarning, match="different to the input size"):
        F.l1_loss(mg.randn(3), mg.randn(2))


# ----------------------------------------------------------------------------- modules
MODULES = [
    ("L1Loss", (), {}), ("MSELoss", (), {"reduction": "sum"}),
    ("SmoothL1Loss", (), {"beta": 0.5}), ("HuberLoss", (), {"delta": 2.0}),
    ("BCELoss", (), {}), ("BCEWithLogitsLoss", (), {}), ("KLDivLoss", (), {"log_target": True}),
    ("CrossEntropyLoss", (), {"label_smoothing": 0.1}), ("NLLLoss", (), {"ignore_index": 1}),
    ("CosineEmbeddingLoss", (0.2,), {}), ("MarginRankingLoss", (0.1,), {}),
    ("TripletMarginLoss", (), {"p": 1.0, "swap": True}), ("GaussianNLLLoss", (), {"full": True}),
    ("PoissonNLLLoss", (False, True), {"eps": 1e-6}),
    ("TripletMarginWithDistanceLoss", (), {"margin": 0.5, "swap": True}),
    ("SoftMarginLoss", (), {"reduction": "none"}), ("HingeEmbeddingLoss", (2.0,), {}),
    ("MultiLabelSoftMarginLoss", (), {}), ("MultiMarginLoss", (2, 0.5), {}),
    ("MultiLabelMarginLoss", (), {}), ("PairwiseDistance", (1.0, 1e-3, True), {}),
    ("CosineSimilarity", (0, 1e-4), {}), ("CTCLoss", (3, "sum", True), {}),
]

ATTRIBUTES = ["reduction", "beta", "delta", "log_target", "ignore_index", "label_smoothing",
              "margin", "p", "eps", "swap", "full", "log_input", "norm", "keepdim", "dim",
              "blank", "zero_infinity"]


@pytest.mark.parametrize("name,args,kwargs", MODULES, ids=[m[0] for m in MODULES])
def test_module_repr_attributes_and_state_match_torch(name, args, kwargs):
    ours, theirs = getattr(mg.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    for attribute in ATTRIBUTES:
        assert getattr(ours, attribute, None) == getattr(theirs, attribute, None), attribute
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("name", ["CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss",
                                  "MultiLabelSoftMarginLoss", "MultiMarginLoss"])
def test_weight_buffers_are_state_and_follow_dtype(name):
    weight = np.array([0.5, 2.0, 1.0])
    ours = getattr(mg.nn, name)(weight=mg.tensor(weight))
    theirs = getattr(torch.nn, name)(weight=torch.tensor(weight))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    np.testing.assert_array_equal(ours.state_dict()["weight"].numpy(), weight)
    assert ours.float().weight.dtype == mg.float32


def test_modules_match_torch_on_a_batch(rng):
    x, t = rng.standard_normal((4, 3)), rng.uniform(0, 1, (4, 3))
    probs = 1 / (1 + np.exp(-x))
    pairs = [
        (mg.nn.L1Loss(reduction="none"), torch.nn.L1Loss(reduction="none"), [x, t]),
        (mg.nn.SmoothL1Loss(beta=0.3), torch.nn.SmoothL1Loss(beta=0.3), [x, t]),
        (mg.nn.HuberLoss(delta=0.3), torch.nn.HuberLoss(delta=0.3), [x, t]),
        (mg.nn.BCELoss(mg.tensor([1.0, 2.0, 0.5])),
         torch.nn.BCELoss(torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)), [probs, t]),
        (mg.nn.KLDivLoss(reduction="batchmean"), torch.nn.KLDivLoss(reduction="batchmean"),
         [np.log(probs), t]),
        (mg.nn.PoissonNLLLoss(), torch.nn.PoissonNLLLoss(), [x, t * 3]),
    ]
    for ours, theirs, arrays in pairs:
        _compare(ours, theirs, arrays, grads=(0, 1))
    anchor, pos, neg = (rng.standard_normal((4, 3)) for _ in range(3))
    _compare(mg.nn.TripletMarginLoss(margin=0.5, p=1.0), torch.nn.TripletMarginLoss(0.5, 1.0),
             [anchor, pos, neg], grads=(0, 1, 2))
    _compare(mg.nn.MarginRankingLoss(0.2), torch.nn.MarginRankingLoss(0.2),
             [x[:, 0], x[:, 1], np.sign(t[:, 0] - 0.5)], grads=(0, 1, 2))
    _compare(mg.nn.CosineEmbeddingLoss(0.1), torch.nn.CosineEmbeddingLoss(0.1),
             [x, t, np.array([1, -1, -1, 1])], grads=(0, 1))


# ----------------------------------------------------------------------------- tangents
FORWARD_AD = [
    ("binary_cross_entropy", lambda a, b: F.binary_cross_entropy(a.sigmoid(), b.sigmoid(),
                                                                 reduction="none"),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
    ("bce_with_logits", lambda a, b, w: F.binary_cross_entropy_with_logits(
        a, b, pos_weight=w, reduction="none"),
     lambda rng: [rng.standard_normal((3, 4)) * 3, rng.uniform(0, 1, (3, 4)),
                  rng.uniform(0.5, 2, 4)]),
    ("smooth_l1", lambda a, b: F.smooth_l1_loss(a, b, beta=0.7, reduction="none"),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
    ("kl_div", lambda a, b: F.kl_div(a.log_softmax(1), b.softmax(1), reduction="batchmean"),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
    ("gaussian_nll", lambda a, b, v: F.gaussian_nll_loss(a, b, v.exp(), reduction="none"),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4)),
                  rng.standard_normal(3)]),
    ("poisson_nll", lambda a, b: F.poisson_nll_loss(a, b.exp() + 1.5, full=True),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
    ("triplet", lambda a, p, n: F.triplet_margin_loss(a, p, n, p=3.0, swap=True,
                                                      reduction="none"),
     lambda rng: [rng.standard_normal((3, 4)) for _ in range(3)]),
    ("cosine_embedding", lambda a, b: F.cosine_embedding_loss(
        a, b, mg.tensor([1, -1, -1]), margin=-0.9, reduction="none"),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
    ("cross_entropy_classes_n_d", lambda a: F.cross_entropy(
        a, mg.tensor([[0, 2], [1, -100]]), mg.tensor([1.0, 2.0, 0.5]), label_smoothing=0.2),
     lambda rng: [rng.standard_normal((2, 3, 2))]),
    ("huber_margin_ranking", lambda a, b: F.huber_loss(a, b, delta=0.5)
     + F.margin_ranking_loss(a, b, mg.tensor([1.0, -1.0, 1.0, -1.0]), margin=0.1),
     lambda rng: [rng.standard_normal(4), rng.standard_normal(4)]),
    ("margin_losses", lambda a: F.multi_margin_loss(a, mg.tensor([0, 2, 1]), p=2,
                                                    weight=mg.tensor([1.0, 0.5, 2.0, 1.5]))
     + F.multilabel_margin_loss(a, mg.tensor([[0, 3, -1, 1], [2, -1, 0, 0], [1, 2, 3, 0]]))
     + F.soft_margin_loss(a, mg.tensor(1.0) - 2 * (a.detach() > 0))
     + F.hinge_embedding_loss(a, mg.tensor([1.0, -1.0, -1.0, 1.0]), margin=0.5),
     lambda rng: [rng.standard_normal((3, 4))]),
    ("multilabel_soft_margin_pairwise", lambda a, b: F.multilabel_soft_margin_loss(
        a, b.sigmoid(), mg.tensor([1.0, 2.0, 0.5, 1.0]), reduction="none")
     + F.pairwise_distance(a, b, p=3.0),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
    ("ctc", lambda a: F.ctc_loss(a.log_softmax(2), mg.tensor([[1, 1], [2, 0]]),
                                 mg.tensor([4, 3]), mg.tensor([2, 1]), reduction="sum"),
     lambda rng: [rng.standard_normal((4, 2, 3))]),
    ("cross_entropy_soft", lambda a, b: F.cross_entropy(a, b.softmax(1), mg.tensor(
        [1.0, 2.0, 0.5, 1.5]), label_smoothing=0.2),
     lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]),
]


@pytest.mark.parametrize("name,fn,make", FORWARD_AD, ids=[c[0] for c in FORWARD_AD])
def test_tangents_and_second_derivatives_match_finite_differences(name, fn, make, rng):
    inputs = [mg.tensor(a, requires_grad=True) for a in make(rng)]
    assert gradcheck(fn, inputs, check_forward_ad=True)
    assert gradgradcheck(fn, inputs)


# ----------------------------------------------------------------------------- float32
FLOAT32 = [
    ("l1_loss", lambda x, t: (x, t), {}), ("mse_loss", lambda x, t: (x, t), {}),
    ("smooth_l1_loss", lambda x, t: (x, t), {"beta": 0.5}),
    ("huber_loss", lambda x, t: (x, t), {"delta": 0.5}),
    ("binary_cross_entropy", lambda x, t: (x.sigmoid(), t), {}),
    ("binary_cross_entropy_with_logits", lambda x, t: (x, t), {}),
    ("kl_div", lambda x, t: (x.log_softmax(1), t), {"reduction": "batchmean"}),
    ("cross_entropy", lambda x, t: (x, t), {"label_smoothing": 0.1}),
    ("gaussian_nll_loss", lambda x, t: (x, t, 0.5), {"full": True}),
    ("poisson_nll_loss", lambda x, t: (x, t), {"full": True}),
]


@pytest.mark.parametrize("name,args,kwargs", FLOAT32, ids=[c[0] for c in FLOAT32])
def test_float32_stays_float32_and_matches_torch(name, args, kwargs, rng):
    x, t = rng.standard_normal((4, 3)), rng.uniform(0.1, 2.0, (4, 3))
    if name in ("binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"):
        t = t / t.sum(1, keepdims=True)
    ours_x = mg.tensor(x, dtype=mg.float32, requires_grad=True)
    theirs_x = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    out = getattr(F, name)(*args(ours_x, mg.tensor(t, dtype=mg.float32)), **kwargs)
    expected = getattr(TF, name)(*args(theirs_x, torch.tensor(t, dtype=torch.float32)), **kwargs)
    out.backward()
    expected.backward()
    assert out.dtype == mg.float32 and ours_x.grad.dtype == mg.float32
    np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-5)
    np.testing.assert_allclose(ours_x.grad.numpy(), theirs_x.grad.numpy(), rtol=1e-4, atol=1e-6)
