"""Loss primitives whose gradients torch defines apart from the derivative of their forward.

Most losses are composed in nn/functional/loss.py from differentiable ops. Binary cross-entropy
is not: torch clamps each log at -100 in the forward, yet its input gradient is the unclamped
(x - t) / (x (1 - x)) with the denominator held at 1e-12 or more, which stays finite at x = 0
and x = 1, where the derivative of the clamped forward would be 0 * inf.
"""
import numpy as np

from .core import Op
from .elementwise import clamp, log

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
