"""Loss primitives: those whose gradients torch defines apart from the derivative of their
forward, and those whose composition costs several passes where a kernel takes one.

Most losses are composed in nn/functional/loss.py from differentiable ops. Binary cross-entropy
is not: torch clamps each log at -100 in the forward, yet its input gradient is the unclamped
(x - t) / (x (1 - x)) with the denominator held at 1e-12 or more, which stays finite at x = 0
and x = 1, where the derivative of the clamped forward would be 0 * inf.
"""
import numpy as np

from ..tensor import Tensor
from .core import Op
from .elementwise import clamp, log
from .reduction import softmax

# Where torch stops each log of binary cross-entropy, and the floor of x (1 - x) in its
# gradient: torch's is the float32 constant 1e-12 in every dtype, so the same here.
_LOG_FLOOR = -100.0
_BCE_EPSILON = float(np.float32(1e-12))


def _binary_cross_entropy(x, t):
    with np.errstate(divide="ignore"):
        log_x = np.maximum(np.log(x), _LOG_FLOOR)
        log_rest = np.maximum(np.log1p(-x), _LOG_FLOOR)
    return ((t - 1) * log_rest - t * log_x).astype(x.dtype, copy=False)


# The target's gradient is the unclamped log(1 - x) - log(x), as in torch (infinite at 0, 1).
binary_cross_entropy = Op(
    "binary_cross_entropy", _binary_cross_entropy,
    (lambda g, ans, x, t: g * (x - t) / clamp((1 - x) * x, min=_BCE_EPSILON),
     lambda g, ans, x, t: g * (log(1 - x) - log(x))),
    saves="x t", elementwise=True)


# Cross-entropy of class-index targets over scores x (rows, C), per row (torch's formula):
# (1 - s) w[t] (lse - x[t]) + s / C sum_c w[c] (lse - x[c]), zero where t == ignore_index.
# The forward and backward are one loop over each row each (kernels/numpy/softmax.py);
# `weight` (an array; torch gives it no gradient) and the target are parameters, not inputs.
def _cross_entropy_slopes(x, target, weight, ignore_index, label_smoothing):
    """d loss[r] / d x[r, c] as a Tensor, built with ops so that it is differentiable:
    (1 - s) w[t] (p - onehot(t)) + s / C (sum(w) p - w), zero on ignored rows."""
    rows, classes = x.shape
    w = np.ones(classes, x.dtype) if weight is None else weight
    keep = target != ignore_index
    safe = np.where(keep, target, 0)
    onehot = np.zeros((rows, classes), x.dtype)
    onehot[np.arange(rows), safe] = 1
    picked = Tensor.wrap(((1 - label_smoothing) * w[safe] * keep).astype(x.dtype)[:, None])
    p = softmax(x, 1)
    slopes = picked * (p - Tensor.wrap(onehot))
    if label_smoothing > 0:
        spread = Tensor.wrap((label_smoothing / classes * keep).astype(x.dtype)[:, None])
        slopes = slopes + spread * (p * float(w.sum()) - Tensor.wrap(w.astype(x.dtype)))
    return slopes


cross_entropy = Op(
    "cross_entropy", None,
    (lambda g, ans, x, target, weight, ignore_index, label_smoothing:
     g.reshape(-1, 1) * _cross_entropy_slopes(x, target, weight, ignore_index, label_smoothing),),
    (lambda t, ans, x, target, weight, ignore_index, label_smoothing:
     (t * _cross_entropy_slopes(x, target, weight, ignore_index, label_smoothing)).sum(1),),
    saves="x", grad_fn_name="NllLossBackward0")


def _mse_norm(x, reduction):
    return 2.0 / max(x.numel(), 1) if reduction == "mean" else 2.0


def _mse_tangent(tangent, x, t, reduction):
    product = (x - t) * tangent * _mse_norm(x, reduction)
    return product if reduction == "none" else product.sum()


# Squared error of same-shaped x and t, one node as torch's: summed, averaged or per element.
# Forward and fused backward: kernels/numpy/loss.py.
mse_loss = Op(
    "mse_loss", None,
    (lambda g, ans, x, t, reduction: (x - t) * g * _mse_norm(x, reduction),
     lambda g, ans, x, t, reduction: (t - x) * g * _mse_norm(x, reduction)),
    (lambda tangent, ans, x, t, reduction: _mse_tangent(tangent, x, t, reduction),
     lambda tangent, ans, x, t, reduction: _mse_tangent(tangent, t, x, reduction)),
    saves="x t")
