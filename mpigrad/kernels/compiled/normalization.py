"""LayerNorm and RMSNorm over the rows of a (rows, D) array, and BatchNorm over the channels
of an (N, C, S) array, forward and backward: each row's or channel's statistics in float64,
then one write per element. A forward writes the statistics its backward needs (mean and
rstd per row, or per channel), and the backward reads them rather than computing them from x
again. `weight` and `bias` hold ones / zeros when absent.

Threads (see _threads.py) take whole rows (LayerNorm, RMSNorm) or whole channels (BatchNorm),
each computed as on one thread. The weight and bias gradients of LayerNorm and RMSNorm sum
over rows: a second pass gives each thread whole blocks of columns, summed over the rows in
row order, so they are the same bits however many threads ran."""
import math

from numba import prange

from ._math import jit
from ._threads import parallel

_COLUMNS = 64  # columns per block of the weight-gradient pass


@jit
def _moments(x, r):
    d = x.shape[1]
    total = 0.0
    for c in range(d):
        total += float(x[r, c])
    mean = total / d
    spread = 0.0
    for c in range(d):
        deviation = float(x[r, c]) - mean
        spread += deviation * deviation
    return mean, spread / d


@parallel()
def layer_norm(x, weight, bias, eps, out, mean, rstd):
    for r in prange(x.shape[0]):
        mu, var = _moments(x, r)
        inv = 1.0 / math.sqrt(var + eps)
        mean[r] = mu
        rstd[r] = inv
        for c in range(x.shape[1]):
            out[r, c] = (float(x[r, c]) - mu) * inv * float(weight[c]) + float(bias[c])


@parallel()
def _affine_grads(g, x, mean, rstd, dweight, dbias):
    """dweight[c] += sum over rows of g xhat, dbias[c] += sum of g (when not empty), xhat =
    (x - mean) rstd, or x rstd when `mean` is empty (RMSNorm); rows added in order."""
    centered = mean.size > 0
    with_bias = dbias.size > 0
    columns = x.shape[1]
    for block in prange((columns + _COLUMNS - 1) // _COLUMNS):
        start = block * _COLUMNS
        stop = min(start + _COLUMNS, columns)
        for r in range(x.shape[0]):
            mu = mean[r] if centered else 0.0
            inv = rstd[r]
            for c in range(start, stop):
                gc = float(g[r, c])
                xhat = (float(x[r, c]) - mu) * inv if centered else float(x[r, c]) * inv
                dweight[c] += gc * xhat
                if with_bias:
                    dbias[c] += gc


@parallel()
def _layer_norm_dx(g, x, weight, mean, rstd, dx):
    d = x.shape[1]
    for r in prange(x.shape[0]):
        mu = mean[r]
        inv = rstd[r]
        sum_gw = 0.0
        sum_gw_xhat = 0.0
        for c in range(d):
            xhat = (float(x[r, c]) - mu) * inv
            gw = float(g[r, c]) * float(weight[c])
            sum_gw += gw
            sum_gw_xhat += gw * xhat
        mean_gw = sum_gw / d
        mean_gw_xhat = sum_gw_xhat / d
        for c in range(d):
            xhat = (float(x[r, c]) - mu) * inv
            dx[r, c] = inv * (float(g[r, c]) * float(weight[c]) - mean_gw - xhat * mean_gw_xhat)


def layer_norm_backward(g, x, weight, mean, rstd, dx, dweight, dbias):
    """dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g w, xhat = (x - mean) rstd;
    dweight and dbias (float64, zeroed by the caller) gather g xhat and g over rows."""
    _layer_norm_dx(g, x, weight, mean, rstd, dx)
    _affine_grads(g, x, mean, rstd, dweight, dbias)


@parallel()
def rms_norm(x, weight, eps, out, rrms):
    d = x.shape[1]
    for r in prange(x.shape[0]):
        total = 0.0
        for c in range(d):
            v = float(x[r, c])
            total += v * v
        inv = 1.0 / math.sqrt(total / d + eps)
        rrms[r] = inv
        for c in range(d):
            out[r, c] = float(x[r, c]) * inv * float(weight[c])


@parallel()
def _rms_norm_dx(g, x, weight, rrms, dx):
    d = x.shape[1]
    for r in prange(x.shape[0]):
        inv = rrms[r]
        sum_gw_xhat = 0.0
        for c in range(d):
            sum_gw_xhat += float(g[r, c]) * float(weight[c]) * (float(x[r, c]) * inv)
        mean_gw_xhat = sum_gw_xhat / d
        for c in range(d):
            xhat = float(x[r, c]) * inv
            dx[r, c] = inv * (float(g[r, c]) * float(weight[c]) - xhat * mean_gw_xhat)


def rms_norm_backward(g, x, weight, rrms, dx, dweight):
    """dx = rrms (gw - xhat mean(gw xhat)), xhat = x rrms; dweight (float64, zeroed by the
    caller) gathers g xhat."""
    _rms_norm_dx(g, x, weight, rrms, dx)
    _affine_grads(g, x, rrms[:0], rrms, dweight, dweight[:0])


@parallel()
def batch_norm(x, weight, bias, eps, out, mean, invstd, var):
    """Training BatchNorm of x (N, C, S) over N and S for each channel: writes the output, and
    each channel's mean, 1 / sqrt(var + eps) and biased variance (for the running one)."""
    count = x.shape[0] * x.shape[2]
    for c in prange(x.shape[1]):
        total = 0.0
        for n in range(x.shape[0]):
            for s in range(x.shape[2]):
                total += float(x[n, c, s])
        mu = total / count
        spread = 0.0
        for n in range(x.shape[0]):
            for s in range(x.shape[2]):
                deviation = float(x[n, c, s]) - mu
                spread += deviation * deviation
        biased = spread / count
        inv = 1.0 / math.sqrt(biased + eps)
        mean[c] = mu
        invstd[c] = inv
        var[c] = biased
        scale = inv * float(weight[c])
        shift = float(bias[c])
        for n in range(x.shape[0]):
            for s in range(x.shape[2]):
                out[n, c, s] = (float(x[n, c, s]) - mu) * scale + shift


@parallel()
def batch_norm_backward(g, x, weight, mean, invstd, dx, dweight, dbias):
    """dx = w invstd (g - mean(g) - xhat mean(g xhat)) over each channel's N S values,
    xhat = (x - mean) invstd; dweight = sum g xhat, dbias = sum g (float64)."""
    count = x.shape[0] * x.shape[2]
    for c in prange(x.shape[1]):
        mu = mean[c]
        inv = invstd[c]
        sum_g = 0.0
        sum_g_xhat = 0.0
        for n in range(x.shape[0]):
            for s in range(x.shape[2]):
                gv = float(g[n, c, s])
                sum_g += gv
                sum_g_xhat += gv * (float(x[n, c, s]) - mu) * inv
        dweight[c] = sum_g_xhat
        dbias[c] = sum_g
        mean_g = sum_g / count
        mean_g_xhat = sum_g_xhat / count
        scale = float(weight[c]) * inv
        for n in range(x.shape[0]):
            for s in range(x.shape[2]):
                xhat = (float(x[n, c, s]) - mu) * inv
                dx[n, c, s] = scale * (float(g[n, c, s]) - mean_g - xhat * mean_g_xhat)
