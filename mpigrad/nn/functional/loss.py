"""Losses: pointwise (l1, mse, huber, ...), probabilistic (binary cross-entropy, KL, Gaussian
and Poisson likelihoods), margin and embedding losses, CTC, and the class-score losses
(cross_entropy, nll_loss). Each reduces as torch's `reduction` says."""
import warnings

import numpy as np

from ... import dtypes, ops
from ...creation import as_tensor
from ...dtypes import torch_name
from ...ops.autocast import float32_policy
from ...tensor import Tensor
from .. import _checks
from .distance import pairwise_distance


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _size(tensor):
    return f"torch.Size({list(tensor.shape)})"


def _difference(input, target):
    """input - target, broadcast against each other as torch's pointwise losses allow, with
    its warning when the shapes differ (a (N, 1) prediction against an (N,) target is the
    usual mistake: it gives an (N, N) loss)."""
    target = as_tensor(target)
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({_size(target)}) that is different to the input "
                      f"size ({_size(input)}). This will likely lead to incorrect results due to "
                      f"broadcasting. Please ensure they have the same size.", stacklevel=3)
    _checks.broadcastable(input.shape, target.shape)
    return input - target


def _weighted_reduce(loss, weight, input, reduction, mean_over_weight):
    """A pointwise loss times an elementwise weight of the input's shape; 'mean' divides by
    the summed weight (l1, mse) or by the element count (huber), as torch does."""
    if weight is None:
        return _reduce(loss, reduction)
    if weight.shape != input.shape:
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean" and mean_over_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """|input - target|, elementwise."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    loss = _difference(input, target).abs()
    if reduction == "mean" and weight is None and not dtypes.is_differentiable(loss.dtype):
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {torch_name(loss.dtype)}")
    return _weighted_reduce(loss, weight, input, reduction, True)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Squared error, elementwise."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    _checks.floating("mse_cpu", input)
    if (weight is None and isinstance(target, Tensor) and target.shape == input.shape
            and target.dtype == input.dtype):
        return ops.mse_loss(input, target, reduction=reduction)  # one node, as torch's
    diff = _difference(input, target)
    loss = _weighted_reduce(diff * diff, weight, input, reduction, True)
    return loss if weight is not None else ops.named(loss, "MseLossBackward0", input)


def _huber(diff, delta):
    """0.5 d^2 for |d| < delta, delta (|d| - delta / 2) beyond: quadratic near zero, linear
    with slope delta outside, continuous in value and slope."""
    size = diff.abs()
    return ops.where(size < delta, 0.5 * diff * diff, delta * (size - 0.5 * delta))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Huber's loss divided by beta: slope one outside |d| < beta; beta = 0 is l1_loss."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    _checks.floating("smooth_l1_cpu", input)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    diff = _difference(input, target)
    if beta == 0:
        return _reduce(diff.abs(), reduction)  # l1_loss, as torch's
    return ops.named(_reduce(_huber(diff, beta) / beta, reduction), "SmoothL1LossBackward0",
                     input)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """Quadratic for |input - target| < delta, linear with slope delta beyond."""
    input, target = float32_policy(input, target)
    _checks.reduction(reduction)
    _checks.floating("huber_cpu", input)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    loss = _weighted_reduce(_huber(_difference(input, target), delta), weight, input,
                            reduction, False)
    return loss if weight is not None else ops.named(loss, "HuberLossBackward0", input)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)) for probabilities x, each log clamped at -100."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({_size(target)}) that is different to the input "
                         f"size ({_size(input)}) is deprecated. Please ensure they have the same "
                         f"size.")
    if target.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {torch_name(target.dtype)} but expected "
                           f"{torch_name(input.dtype)}")
    for name, values in (("input", input._array), ("target", target._array)):
        if not ((values >= 0) & (values <= 1)).all():
            raise RuntimeError(f"all elements of {name} should be between 0 and 1")
    loss = ops.binary_cross_entropy(input, target)
    if weight is not None:
        loss = loss * weight
    return ops.named(_reduce(loss, reduction), "BinaryCrossEntropyBackward0", input)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """binary_cross_entropy(sigmoid(x), t) without forming sigmoid(x):
    (1 - t) x - w_t log sigmoid(x), w_t = 1 + (pos_weight - 1) t, finite for any |x|.

    pos_weight scales the positive term per class, broadcasting like any operand (so a (C,)
    pos_weight meets the last dimension of an (N, C) input)."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({_size(target)}) must be the same as input size "
                         f"({_size(input)})")
    if not dtypes.is_floating_point(target.dtype):
        raise RuntimeError(f"result type {torch_name(input.dtype)} can't be cast to the desired "
                           f"output type {torch_name(target.dtype)}")
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * input - log_weight * ops.log_sigmoid(input)
    if weight is not None:
        loss = loss * weight
    return ops.named(_reduce(loss, reduction), "BinaryCrossEntropyWithLogitsBackward0", input)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence t (log t - x) of a target from log-probabilities x (0 where
    t = 0); with log_target the target is log t. 'batchmean' divides the sum by the batch
    size, the mathematical KL divergence of each sample; 'mean' divides by every element."""
    input, target = float32_policy(input, target)
    legacy = size_average is not None or reduce is not None
    reduction = _checks.legacy_reduction(size_average, reduce, reduction, extra=("batchmean",))
    if reduction == "mean" and not legacy:
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", stacklevel=2)
    target = as_tensor(target)
    _checks.broadcastable(input.shape, target.shape)
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        # t log t with its limit 0 at t = 0, and a finite gradient there (torch's is 0 / 0).
        zero = Tensor.wrap(target._array == 0)
        loss = ops.where(zero, 0.0, target * ops.log(ops.where(zero, 1.0, target))) - target * input
    if reduction != "batchmean":
        return _reduce(loss, reduction)
    return loss.sum() / input.shape[0] if input.ndim else loss.sum()


# Added to each squared norm so that cos stays finite for a zero vector; torch's is the
# float32 constant 1e-12 in every dtype, so the same here.
_COSINE_EPSILON = float(np.float32(1e-12))


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where the target is 1, max(0, cos - margin) where it is -1 (0 for any
    other target); rows are compared, or two vectors for a 0-d target."""
    input1, input2 = float32_policy(input1, input2)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    if target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input1.ndim != target.ndim + 1 or input2.ndim != target.ndim + 1:
        raise RuntimeError(f"{target.ndim}D target tensor expects {target.ndim + 1}D input "
                           f"tensors, but found inputs with sizes {list(input1.shape)} and "
                           f"{list(input2.shape)}.")
    _checks.broadcastable(input1.shape, input2.shape)
    dim = target.ndim
    squares = (((input1 * input1).sum(dim) + _COSINE_EPSILON)
               * ((input2 * input2).sum(dim) + _COSINE_EPSILON))
    cos = (input1 * input2).sum(dim) / squares.sqrt()
    t = target._array
    loss = (ops.where(Tensor.wrap(t == 1), 1 - cos, 0.0)
            + ops.where(Tensor.wrap(t == -1), ops.clamp(cos - margin, min=0.0), 0.0))
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -t (x1 - x2) + margin): x1 should rank above x2 by the margin where t = 1,
    below where t = -1."""
    input1, input2 = float32_policy(input1, input2)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {_size(input1)}, input2: {_size(input2)}, "
                           f"target: {_size(target)} ")
    _checks.broadcastable(input1.shape, input2.shape)
    _checks.broadcastable(np.broadcast_shapes(input1.shape, input2.shape), target.shape)
    return _reduce(ops.clamp(-target * (input1 - input2) + margin, min=0.0), reduction)


def _triplet_loss(anchor, positive, negative, distance, margin, swap, reduction):
    """max(0, margin + d(a, p) - d(a, n)); swap uses d(p, n) instead of d(a, n) where it is
    smaller (Balntas et al., 2016)."""
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the "
                           f"same number of dimensions, but got: anchor {anchor.ndim}D, positive "
                           f"{positive.ndim}D, and negative {negative.ndim}D inputs")
    positive_distance = distance(anchor, positive)
    negative_distance = distance(anchor, negative)
    if swap:
        negative_distance = ops.minimum(negative_distance, distance(positive, negative))
    return _reduce(ops.clamp(margin + positive_distance - negative_distance, min=0.0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """The triplet loss with pairwise_distance(p, eps) between rows."""
    anchor, positive, negative = float32_policy(anchor, positive, negative)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    return _triplet_loss(anchor, positive, negative,
                         lambda x1, x2: pairwise_distance(x1, x2, p, eps), margin, swap,
                         reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """The triplet loss with any distance function (default pairwise_distance)."""
    _checks.reduction(reduction)
    return _triplet_loss(anchor, positive, negative, distance_function or pairwise_distance,
                         margin, swap, reduction)


def _gaussian_var(var, input):
    """var shaped to broadcast against input, as torch accepts it: input's shape, input's
    shape without its last dimension, or input's shape with one dimension of size 1."""
    if var.shape == input.shape:
        return var
    if var.shape == input.shape[:-1]:
        return var.unsqueeze(-1)
    mismatched = [v for i, v in zip(input.shape, var.shape) if i != v]
    if var.ndim == input.ndim and mismatched == [1]:
        return var
    raise ValueError("var is of incorrect size")


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Negative log-likelihood of target under N(input, var): (log var + (x - t)^2 / var) / 2,
    plus log(2 pi) / 2 if full. var is clamped at eps, the gradient passing the clamp as if
    it were not there (torch clamps without recording)."""
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = Tensor.wrap(np.full(input.shape, var, input.dtype))
    elif not isinstance(var, Tensor):
        raise TypeError(f"gaussian_nll_loss: var must be a Tensor or a float, got "
                        f"{type(var).__name__}")
    elif (var._array < 0).any():
        raise ValueError("var has negative entry/entries")
    var = _gaussian_var(var, input)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not valid")
    var = var + (ops.clamp(var, min=eps) - var).detach()
    target = as_tensor(target)
    _checks.broadcastable(input.shape, target.shape)
    diff = input - target
    loss = 0.5 * (ops.log(var) + diff * diff / var)
    if full:
        loss = loss + 0.5 * float(np.log(2 * np.pi))  # a numpy scalar would promote float32
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """Negative log-likelihood of counts t under Poisson(rate): exp(x) - t x for a log-rate
    x (log_input), else x - t log(x + eps); full adds Stirling's t log t - t + log(2 pi t) / 2
    for log(t!) where t > 1."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    _checks.broadcastable(input.shape, target.shape)
    if log_input:
        loss = ops.exp(input) - target * input
    else:
        loss = input - target * ops.log(input + eps)
    if full:
        small = Tensor.wrap(target._array <= 1)
        # Where t <= 1 the term is dropped; its log would see 0 or a negative there.
        with np.errstate(divide="ignore", invalid="ignore"):
            stirling = (target * ops.log(target) - target
                        + 0.5 * ops.log(2 * np.pi * target))
        loss = loss + stirling.masked_fill(small, 0.0)
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-t x)), the logistic loss of a +-1 target (as -log sigmoid(t x), finite
    where exp(-t x) would overflow)."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    _checks.broadcastable(input.shape, target.shape)
    return _reduce(-ops.log_sigmoid(target * input), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """x where the target is 1, max(0, margin - x) where it is -1 (for x a distance)."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    _checks.broadcastable(input.shape, target.shape)
    t = target._array
    return _reduce(ops.where(Tensor.wrap(t != 1), ops.clamp(margin - input, min=0.0), 0.0)
                   + ops.where(Tensor.wrap(t != -1), input, 0.0), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """Binary logistic loss of each class against a 0/1 target, averaged over the classes
    (the last dimension)."""
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    target = as_tensor(target)
    _checks.broadcastable(input.shape, target.shape)
    loss = -(target * ops.log_sigmoid(input) + (1 - target) * ops.log_sigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.sum(-1) / input.shape[-1], reduction)


def _check_margin_scores(input):
    if input.ndim > 2 or input.numel() == 0:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, "
                           f"but got: {list(input.shape)}")


def _check_long(target):
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"expected scalar type Long but found {torch_name(target.dtype)}")


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """The multi-class hinge loss of class-index targets y: per sample, the sum over classes
    i != y of w[y] max(0, margin - x[y] + x[i])^p, divided by the number of classes."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    _check_margin_scores(input)
    t = as_tensor(target)._array
    if input.ndim == 1 and t.shape == (1,):
        t = t.reshape(())
    expected = input.shape[:-1]
    if t.shape != expected:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to "
                           f"the number of input samples (batch size). Expected target size "
                           f"{list(expected)}, but got {list(t.shape)}. Input has shape "
                           f"{list(input.shape)}.")
    _check_long(t)
    classes = input.shape[-1]
    if ((t < 0) | (t >= classes)).any():
        raise RuntimeError("target out of range")
    if weight is not None and weight.shape[0] != classes:
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got "
                           f"{list(weight.shape)}")
    index = t[..., None]
    # relu, not clamp: torch's gradient is zero where the margin is met exactly.
    hinge = ops.relu(margin - ops.take_along_dim(input, index, -1) + input)
    if p == 2:
        hinge = hinge * hinge
    # The target's own class is left out; the class weight is torch's constant, not learned.
    scale = (np.arange(classes) != index) / classes
    if weight is not None:
        scale = scale * weight._array[index]
    return _reduce((hinge * Tensor.wrap(scale.astype(input.dtype))).sum(-1), reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Hinge between each target class j and each other class i: per sample, the sum of
    max(0, 1 - (x[j] - x[i])) over both, divided by the number of classes. A row of target
    lists its classes first, ended by -1 where they are fewer than all."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    _check_margin_scores(input)
    t = as_tensor(target)._array
    if t.shape != input.shape:
        raise RuntimeError(f"inconsistent target size: {list(t.shape)} for input of size: "
                           f"{list(input.shape)}")
    _check_long(t)
    classes = input.shape[-1]
    rows = t.reshape(-1, classes)
    if ((rows < -1) | (rows >= classes)).any():
        raise RuntimeError("argument #2 'target' is out of range")
    listed = np.cumprod(rows != -1, axis=1).astype(bool)
    # How often each class is listed (a repeated class counts each time, as in torch).
    counts = np.zeros(rows.shape, input.dtype)
    np.add.at(counts, (np.nonzero(listed)[0], rows[listed]), 1)
    pair_weight = counts[:, :, None] * (counts == 0)[:, None, :] / classes
    x = input.reshape(-1, classes)
    hinge = ops.relu(1 - x.unsqueeze(2) + x.unsqueeze(1))  # [n, j, i]: 1 - x[j] + x[i]
    loss = (hinge * Tensor.wrap(pair_weight)).sum((1, 2))
    return _reduce(loss.reshape(input.shape[:-1]), reduction)


def _lengths(values, what):
    """input_lengths or target_lengths (a tensor or a sequence of ints) as an int64 array."""
    array = np.asarray(values._array if isinstance(values, Tensor) else values)
    if array.dtype.kind not in "iu":
        raise RuntimeError(f"{what} must be integral")
    return array.astype(np.int64).reshape(-1)


def _ctc_labels(targets, target_lengths, batch, classes):
    """The targets as a (batch, longest) array, padded or concatenated as torch takes them."""
    t = np.asarray(targets._array if isinstance(targets, Tensor) else targets).astype(np.int64)
    longest = int(target_lengths.max(initial=0))
    if t.ndim == 1 and batch > 1 or t.ndim == 0:
        total = int(target_lengths.sum())
        if t.size != total:
            raise RuntimeError(f"Expected tensor to have size {total} at dimension 0, but got "
                               f"size {t.size} for argument #2 'targets'")
        labels = np.zeros((batch, longest), np.int64)
        labels[np.arange(longest) < target_lengths[:, None]] = t
    else:
        labels = t.reshape(batch, -1)
        if labels.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension 1, "
                               f"but got size {labels.shape[1]} for argument #2 'targets'")
        labels = labels[:, :longest]
    used = labels[np.arange(longest) < target_lengths[:, None]]
    if ((used < 0) | (used >= classes)).any():
        raise RuntimeError(f"ctc_loss: target labels must be in [0, {classes}), got "
                           f"{used[(used < 0) | (used >= classes)][0]}")
    return labels


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """Connectionist temporal classification (Graves et al., 2006): -log of the summed
    probability of every alignment of each target to its frames of log_probs (T, N, C), by
    the forward recursion over the target with blanks between and around its labels.

    As torch's, the gradient with respect to log_probs is the one for the logits of a
    log_softmax producing them: it carries an extra exp(log_probs) in each frame within the
    input length, which log_softmax's own gradient cancels."""
    log_probs, targets = float32_policy(log_probs, targets)
    _checks.reduction(reduction)
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
    if log_probs.ndim != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs of shape (T, N, C) or (T, C), got "
                           f"{list(log_probs.shape)}")
    steps, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    input_lengths = _lengths(input_lengths, "input_lengths")
    target_lengths = _lengths(target_lengths, "target_lengths")
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.shape != (batch,):
            raise RuntimeError(f"{name} must be of size batch_size")
        if lengths.min(initial=0) < 0:
            raise RuntimeError(f"Expected {name} to have value at least 0, but got value "
                               f"{lengths.min()}")
    if input_lengths.max(initial=0) > steps:
        raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got "
                           f"value {input_lengths.max()}")
    labels = _ctc_labels(targets, target_lengths, batch, classes)
    # The extended target: blank, l1, blank, l2, ..., blank; a path may skip the blank
    # between two different labels.
    width = 2 * labels.shape[1] + 1
    extended = np.full((batch, width), blank)
    extended[:, 1::2] = labels
    skip = np.zeros((batch, width), bool)
    skip[:, 3::2] = labels[:, 1:] != labels[:, :-1]
    emit = ops.take_along_dim(log_probs, np.broadcast_to(extended, (steps, batch, width)), 2)
    # log 0 as a finite number, so a logsumexp over impossible paths has a zero gradient
    # rather than 0 * inf; it is absorbed by any real log-probability added to it.
    log_zero = float(np.finfo(log_probs.dtype).min) / 4
    alpha = ops.where(Tensor.wrap(np.arange(width) < 2), emit[0], log_zero)
    running = Tensor.wrap((np.arange(steps)[:, None] < input_lengths)[..., None])
    skip = Tensor.wrap(skip)
    for t in range(1, steps):
        one_back = ops.pad(alpha, (1, 0), value=log_zero)[:, :width]
        two_back = ops.where(skip, ops.pad(alpha, (2, 0), value=log_zero)[:, :width], log_zero)
        step = ops.logsumexp(ops.stack([alpha, one_back, two_back]), 0) + emit[t]
        alpha = ops.where(running[t], step, alpha)
    last = 2 * target_lengths[:, None]
    before = ops.where(Tensor.wrap(last > 0),
                       ops.take_along_dim(alpha, np.maximum(last - 1, 0), 1), log_zero)
    loss = -ops.logsumexp(ops.cat([ops.take_along_dim(alpha, last, 1), before], 1), 1)
    frames = ops.exp(log_probs) * running
    loss = loss + (frames - frames.detach()).sum((0, 2))
    impossible = loss._array > -log_zero / 2
    if impossible.any():
        loss = ops.where(Tensor.wrap(impossible), 0.0 if zero_infinity else np.inf, loss)
    if reduction == "mean":
        lengths = np.maximum(target_lengths, 1).astype(log_probs.dtype)
        return (loss / Tensor.wrap(lengths)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss


# --- class scores: cross_entropy and nll_loss
def _check_weight(weight, classes, what=""):
    if weight is not None and tuple(weight.shape) != (classes,):
        raise RuntimeError(f"{what}weight tensor should be defined either for all {classes} "
                           f"classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")


def _class_dim(input):
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    return 0 if input.ndim == 1 else 1


def _class_target(scores, target, class_dim):
    """The class-index array of target after torch's checks against scores (C,) or
    (N, C, d1, ...); unbatched scores also take a target of shape (1,), as in torch."""
    t = target._array
    if scores.ndim == 1 and t.shape == (1,):
        t = t.reshape(())
    batch = t.shape[0] if t.ndim else 0
    if scores.ndim >= 2 and batch != scores.shape[0]:
        raise ValueError(f"Expected input batch_size ({scores.shape[0]}) to match target "
                         f"batch_size ({batch}).")
    expected = scores.shape[:class_dim] + scores.shape[class_dim + 1:]
    if t.shape != expected:
        if scores.ndim <= 2:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        raise RuntimeError(f"Expected target size {list(expected)}, got {list(t.shape)}")
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{torch_name(t.dtype)}")
    return t


def _class_target_loss(log_probs, target, weight, ignore_index, reduction, label_smoothing):
    """Negative log-likelihood of class-index targets, optionally smoothed towards uniform.

    Follows torch exactly: per element, (1 - s) * w[t] * -logp[t] + s / C * sum_c w[c] *
    -logp[c], zero where target == ignore_index; 'mean' divides by the summed w[t] of the
    targets that are not ignored.
    """
    class_dim = _class_dim(log_probs)
    classes = log_probs.shape[class_dim]
    t = _class_target(log_probs, target, class_dim)
    _check_weight(weight, classes)
    # The class dimension stays (with size 1) until 'none' drops it: one node fewer on the
    # common path, and the mask and weights line up with log_probs for broadcasting.
    index = np.expand_dims(t, class_dim)
    ignored = index == ignore_index
    any_ignored = bool(ignored.any())
    if any_ignored:
        index = np.where(ignored, 0, index)
    bad = (index < 0) | (index >= classes)
    if bad.any():
        raise IndexError(f"Target {index[bad].flat[0]} is out of bounds.")
    picked = ops.take_along_dim(log_probs, index, class_dim)
    # Weight of each element's target class; None when every element counts once.
    target_weight = None
    if weight is not None:
        target_weight = weight._array[index]
        if any_ignored:
            target_weight = np.where(ignored, 0, target_weight)
    elif any_ignored:
        target_weight = (~ignored).astype(log_probs.dtype)
    loss = -picked if target_weight is None else picked * Tensor.wrap(-target_weight)
    if label_smoothing > 0:
        per_class = log_probs if weight is None else log_probs * _along_classes(weight, log_probs,
                                                                                class_dim)
        smooth = -per_class.sum(class_dim, keepdim=True)
        if any_ignored:
            smooth = smooth.masked_fill(Tensor.wrap(ignored), 0.0)
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    if reduction == "none":
        return loss.squeeze(class_dim)
    if reduction == "sum":
        return loss.sum()
    if target_weight is None:
        return loss.mean()
    return loss.sum() / float(target_weight.sum())


def _fused_class_cross_entropy(input, target, weight, ignore_index, reduction, smoothing):
    """cross_entropy of class-index targets through the fused op (log_softmax and the NLL in
    one loop per row, forward and backward): scores with the class dimension moved last."""
    class_dim = _class_dim(input)
    classes = input.shape[class_dim]
    t = _class_target(input, target, class_dim)
    _check_weight(weight, classes)
    ignored = t == ignore_index
    bad = ~ignored & ((t < 0) | (t >= classes))
    if bad.any():
        raise IndexError(f"Target {t[bad].flat[0]} is out of bounds.")
    if input.ndim > 2:
        input = input.permute((0,) + tuple(range(2, input.ndim)) + (1,))
    scores = input.reshape(-1, classes)
    w = None if weight is None else weight._array
    loss = ops.cross_entropy(scores, target=t.reshape(-1), weight=w, ignore_index=ignore_index,
                             label_smoothing=smoothing)
    if reduction == "none":
        return loss.reshape(t.shape)
    if reduction == "sum":
        return loss.sum()
    if w is None and not ignored.any():
        return loss.mean()
    counted = np.where(ignored, 0, 1 if w is None else w[np.where(ignored, 0, t)])
    return loss.sum() / float(counted.sum())


def _along_classes(weight, scores, class_dim):
    """The per-class weight shaped to broadcast against scores (N, C, d1, ...)."""
    return weight.reshape(weight.shape + (1,) * (scores.ndim - 1 - class_dim))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class-index targets, given log-probabilities (N, C, ...)."""
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    return _nll_named(_class_target_loss(input, as_tensor(target), weight, ignore_index,
                                         reduction, 0.0), input, reduction)


def _nll_named(loss, input, reduction):
    """torch's node for a class-index loss: NllLossBackward0 up to (N, C), NllLoss2D beyond
    (its 3-d input reshaped to 4-d, so reduction 'none' ends in a view)."""
    if input.ndim <= 2:
        return ops.named(loss, "NllLossBackward0", input)
    if input.ndim == 4 or (input.ndim == 3 and reduction != "none"):
        return ops.named(loss, "NllLoss2DBackward0", input)
    return ops.named(loss, "ViewBackward0", input) if input.ndim == 3 else loss


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """log_softmax over the class dimension, then the negative log-likelihood of the target.

    Targets are class indices (N, d1, ...) of an integer dtype, or class probabilities of the
    input's shape (floating point; ignore_index does not apply, 'mean' averages over the
    N * d1 * ... elements).
    """
    input, target = float32_policy(input, target)
    reduction = _checks.legacy_reduction(size_average, reduce, reduction)
    # As in torch, a negative label_smoothing is no smoothing rather than an error.
    if label_smoothing > 1:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    target = as_tensor(target)
    class_dim = _class_dim(input)
    _checks.floating("log_softmax_lastdim_kernel_impl", input)
    if target.shape != input.shape or not dtypes.is_floating_point(target.dtype):
        loss = _fused_class_cross_entropy(input, target, weight, ignore_index, reduction,
                                          max(label_smoothing, 0.0))
        # Smoothing is a sum of two terms in torch; without it, torch's NLL node.
        return (ops.named(loss, "AddBackward0", input) if label_smoothing > 0
                else _nll_named(loss, input, reduction))
    log_probs = ops.log_softmax(input, class_dim)
    if ignore_index >= 0:
        raise RuntimeError("ignore_index is not supported for floating point target")
    classes = input.shape[class_dim]
    _check_weight(weight, classes, "cross_entropy: ")
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    per_class = log_probs * target
    if weight is not None:
        per_class = per_class * _along_classes(weight, input, class_dim)
    # torch sums, negates, then divides for 'mean'.
    return ops.named(_reduce(-per_class.sum(class_dim), reduction),
                     "DivBackward1" if reduction == "mean" else "NegBackward0", input)
