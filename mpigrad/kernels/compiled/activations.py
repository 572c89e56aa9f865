"""GELU (exact and tanh), SiLU, the sigmoid, ELU (SELU, CELU) and softplus, forward and
backward, one pass each over flat arrays.

Each loop reads its inputs once and writes its output once; the loops not marked float32 work
in float64 (see _math.py). `x`, `g` and `out` are contiguous 1-d arrays of one length, split
among threads by element (see _threads.py).
"""
import math

import numpy as np
from numba import prange

from ._math import (any_exp, any_expm1, any_log1p_unit, exp, exp_f32, gaussian_f32, jit,
                    normal_cdf_f32)
from ._threads import parallel

_SQRT1_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_INV_SQRT_2PI_F32 = np.float32(_INV_SQRT_2PI)
_SQRT_2_OVER_PI = 0.7978845608028654
_CUBIC = 0.044715


# float32: in float32 arithmetic throughout (normal_cdf_f32 in _math.py), twice the lanes of
# float64 and no widening; x, g and out are float32 arrays.
@parallel(rows=("x", "out"))
def gelu_f32(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = v * normal_cdf_f32(v, gaussian_f32(v))


@parallel(rows=("g", "x", "out"))
def gelu_backward_f32(g, x, out):
    for i in prange(x.size):
        v = x[i]
        gaussian = gaussian_f32(v)
        out[i] = g[i] * (normal_cdf_f32(v, gaussian) + v * _INV_SQRT_2PI_F32 * gaussian)


# float64: math.erf (a scalar libm call, exact to an ulp); the erf above is float32's.
@parallel(rows=("x", "out"))
def gelu_f64(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = 0.5 * v * (1.0 + math.erf(v * _SQRT1_2))


@parallel(rows=("g", "x", "out"))
def gelu_backward_f64(g, x, out):
    for i in prange(x.size):
        v = x[i]
        cdf = 0.5 * (1.0 + math.erf(v * _SQRT1_2))
        out[i] = g[i] * (cdf + v * _INV_SQRT_2PI * exp(-0.5 * v * v))


@jit
def _tanh(u):
    # 1 - 2 / (e^2u + 1): exact at the saturated ends (e^2u = inf or 0), and its absolute
    # error near 0 (where tanh is small) is an ulp of 1, which 1 + tanh needs anyway.
    return 1.0 - 2.0 / (exp(2.0 * u) + 1.0)


@parallel(rows=("x", "out"))
def gelu_tanh(x, out):
    for i in prange(x.size):
        v = float(x[i])
        out[i] = 0.5 * v * (1.0 + _tanh(_SQRT_2_OVER_PI * (v + _CUBIC * v * v * v)))


@parallel(rows=("g", "x", "out"))
def gelu_tanh_backward(g, x, out):
    for i in prange(x.size):
        v = float(x[i])
        t = _tanh(_SQRT_2_OVER_PI * (v + _CUBIC * v * v * v))
        slope = _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * v * v)
        out[i] = g[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * slope)


# SiLU and the logistic sigmoid, float32 in float32 arithmetic (exp_f32, twice the lanes of
# float64 and a shorter polynomial), float64 with `exp`. 2M float32 elements, one thread:
# SiLU forward 4.9 ms with float64 exponentials (torch 1.9), sigmoid 4.6 as three numpy
# passes (torch 1.7).
_ONE_F32 = np.float32(1.0)


@parallel(rows=("x", "out"))
def silu_f32(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = v / (_ONE_F32 + exp_f32(-v))


@parallel(rows=("g", "x", "out"))
def silu_backward_f32(g, x, out):
    for i in prange(x.size):
        v = x[i]
        s = _ONE_F32 / (_ONE_F32 + exp_f32(-v))
        out[i] = g[i] * s * (_ONE_F32 + v * (_ONE_F32 - s))


@parallel(rows=("x", "out"))
def silu_f64(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = v / (1.0 + exp(-v))


@parallel(rows=("g", "x", "out"))
def silu_backward_f64(g, x, out):
    for i in prange(x.size):
        v = x[i]
        s = 1.0 / (1.0 + exp(-v))
        out[i] = g[i] * s * (1.0 + v * (1.0 - s))


@parallel(rows=("x", "out"))
def sigmoid_f32(x, out):
    """torch's 1 / (1 + e**-x): 0 where e**-x overflows, as it should be."""
    for i in prange(x.size):
        out[i] = _ONE_F32 / (_ONE_F32 + exp_f32(-x[i]))


@parallel(rows=("x", "out"))
def sigmoid_f64(x, out):
    for i in prange(x.size):
        out[i] = 1.0 / (1.0 + exp(-x[i]))


@parallel(rows=("g", "y", "out"))
def sigmoid_backward(g, y, out):
    """g y (1 - y) from the output y, in y's dtype."""
    one = y.dtype.type(1.0)
    for i in prange(y.size):
        out[i] = g[i] * y[i] * (one - y[i])


# ELU, SELU and CELU, and softplus: one loop for float32 and float64, the arithmetic in x's
# dtype (the caller passes the parameters in it; any_exp and the like pick the float32 math
# for float32). (64, 128, 256) float32: ELU 27.6 ms as numpy's expm1 and where, torch 9.8.
@parallel(rows=("x", "out"))
def elu(x, negative_scale, positive_scale, input_scale, out):
    """scale x above 0, alpha scale (e**(x input_scale) - 1) at and below, as torch's elu
    (negative_scale = alpha scale, positive_scale = scale); nan stays nan."""
    zero = x.dtype.type(0.0)
    for i in prange(x.size):
        v = x[i]
        out[i] = v * positive_scale if v > zero else any_expm1(v * input_scale) * negative_scale


@parallel(rows=("g", "x", "out"))
def elu_backward(g, x, negative_scale, positive_scale, input_scale, out):
    zero = x.dtype.type(0.0)
    negative_slope = negative_scale * input_scale
    for i in prange(x.size):
        v = x[i]
        slope = positive_scale if v > zero else any_exp(v * input_scale) * negative_slope
        out[i] = g[i] * slope


@parallel(rows=("x", "out"))
def softplus(x, beta, threshold, out):
    """log(1 + e**(beta x)) / beta, taken as max(s, 0) + log(1 + e**-|s|) of s = beta x, which
    neither overflows nor loses e**s below 1; x itself above the threshold, as torch."""
    zero = x.dtype.type(0.0)
    for i in prange(x.size):
        v = x[i]
        s = v * beta
        soft = (max(s, zero) + any_log1p_unit(any_exp(-abs(s)))) / beta
        out[i] = v if s > threshold else soft


@parallel(rows=("g", "x", "out"))
def softplus_backward(g, x, beta, threshold, out):
    """g times the sigmoid of beta x; g itself above the threshold."""
    one = x.dtype.type(1.0)
    for i in prange(x.size):
        s = x[i] * beta
        out[i] = g[i] if s > threshold else g[i] / (one + any_exp(-s))
