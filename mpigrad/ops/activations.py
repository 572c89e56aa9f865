"""torch.nn's pointwise activations: each forward (numpy here, or a compiled loop in
kernels/numpy/activations.py where the op passes None) with its derivative beside it.

All Jacobians are diagonal (`elementwise=True`). Where torch defines a derivative at a kink,
the rule picks the same side (the flat pieces for hardtanh, hardsigmoid and hardswish at
their bounds, elu's exponential piece at 0).
"""
import numpy as np

from .core import Op
from .elementwise import clamp, exp, sigmoid, where


def _hardtanh(x, min_val, max_val):
    return np.clip(x, np.asarray(min_val, x.dtype), np.asarray(max_val, x.dtype))


hardtanh = Op("hardtanh", _hardtanh,
              (lambda g, ans, x, min_val, max_val: where((x > min_val) & (x < max_val), g, 0.0),),
              saves="x", elementwise=True)


# One compiled pass each way (kernels/numpy/elementwise.py). Out of place the derivative is
# read from the input (torch's LeakyReluBackward0), for any slope.
leaky_relu = Op("leaky_relu", None,
                (lambda g, ans, x, negative_slope: where(x > 0, g, g * negative_slope),),
                saves="x", elementwise=True)
# In place it is read from the output, as torch's leaky_relu_ reads it (for a slope >= 0 the
# output is positive exactly where the input is), so the input may be overwritten:
# nn.LeakyReLU(inplace=True).
leaky_relu_ = Op("leaky_relu_", None,
                 (lambda g, ans, x, negative_slope: where(ans > 0, g, g * negative_slope),),
                 saves="ans", elementwise=True, grad_fn_name="LeakyReluBackward1")


def _elu_grad(g, ans, x, alpha, scale, input_scale):
    # exp only of the non-positive part: the positive side would overflow and is not used.
    negative = exp(clamp(x, max=0.0) * input_scale) * (alpha * scale * input_scale)
    return g * where(x > 0, scale, negative)


# ELU, SELU and CELU: scale * x above 0, alpha * scale * (exp(x * input_scale) - 1) below.
# Forward and fused backward: kernels/numpy/activations.py.
elu = Op("elu", None, (_elu_grad,), saves="x", elementwise=True)


# Above the threshold softplus is taken to be x itself, so its slope is exactly one there.
# Forward and fused backward: kernels/numpy/activations.py.
softplus = Op("softplus", None,
              (lambda g, ans, x, beta, threshold:
               g * where(x * beta > threshold, 1.0, sigmoid(x * beta)),),
              saves="x", elementwise=True)


def _log_sigmoid(x):
    # min(x, 0) - log(1 + exp(-|x|)): no overflow and no cancellation at either end.
    return (np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


log_sigmoid = Op("log_sigmoid", _log_sigmoid, (lambda g, ans, x: g * sigmoid(-x),), saves="x",
                 elementwise=True)


# torch's slope is the float32 constant 1/6 in every dtype; the same here, so float64 gradients
# agree to the last digit.
_ONE_SIXTH = float(np.float32(1 / 6))


def _hardsigmoid(x):
    return np.clip(x / 6 + 0.5, 0, 1).astype(x.dtype, copy=False)


hardsigmoid = Op("hardsigmoid", _hardsigmoid,
                 (lambda g, ans, x: where((x > -3) & (x < 3), g * _ONE_SIXTH, 0.0),), saves="x",
                 elementwise=True)


def _hardswish(x):
    return (x * np.clip(x + 3, 0, 6) / 6).astype(x.dtype, copy=False)


hardswish = Op("hardswish", _hardswish,
               (lambda g, ans, x: where(x <= -3, 0.0, where(x < 3, g * (x / 3 + 0.5), g)),),
               saves="x", elementwise=True)


def _threshold(x, threshold, value):
    return np.where(x > threshold, x, np.asarray(value, x.dtype))


threshold = Op("threshold", _threshold,
               (lambda g, ans, x, threshold, value: where(x > threshold, g, 0.0),), saves="x",
               elementwise=True)
