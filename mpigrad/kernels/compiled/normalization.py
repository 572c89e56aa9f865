"""LayerNorm and RMSNorm over the rows of a (rows, D) array, and BatchNorm over the channels
of an (N, C, S) array, forward and backward: each row's or channel's statistics in float64,
then one write per element. A forward writes the statistics its backward needs (mean and
rstd per row, or per channel), and the backward reads them rather than computing them from x
again. `weight` and `bias` hold ones / zeros when absent."""
import math

from ._math import jit


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


@jit
def layer_norm(x, weight, bias, eps, out, mean, rstd):
    for r in range(x.shape[0]):
        mu, var = _moments(x, r)
        inv = 1.0 / math.sqrt(var + eps)
        mean[r] = mu
        rstd[r] = inv
        for c in range(x.shape[1]):
            out[r, c] = (float(x[r, c]) - mu) * inv * float(weight[c]) + float(bias[c])


@jit
def layer_norm_backward(g, x, weight, mean, rstd, dx, dweight, dbias):
    """dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g w, xhat = (x - mean) rstd;
    dweight and dbias (float64, zeroed by the caller) gather g xhat and g over rows."""
    d = x.shape[1]
    for r in range(x.shape[0]):
        mu = mean[r]
        inv = rstd[r]
        sum_gw = 0.0
        sum_gw_xhat = 0.0
        for c in range(d):
            gc = float(g[r, c])
            xhat = (float(x[r, c]) - mu) * inv
            gw = gc * float(weight[c])
            sum_gw += gw
            sum_gw_xhat += gw * xhat
            dweight[c] += gc * xhat
            dbias[c] += gc
        mean_gw = sum_gw / d
        mean_gw_xhat = sum_gw_xhat / d
        for c in range(d):
            xhat = (float(x[r, c]) - mu) * inv
            dx[r, c] = inv * (float(g[r, c]) * float(weight[c]) - mean_gw - xhat * mean_gw_xhat)


@jit
def rms_norm(x, weight, eps, out, rrms):
    d = x.shape[1]
    for r in range(x.shape[0]):
        total = 0.0
        for c in range(d):
            v = float(x[r, c])
            total += v * v
        inv = 1.0 / math.sqrt(total / d + eps)
        rrms[r] = inv
        for c in range(d):
            out[r, c] = float(x[r, c]) * inv * float(weight[c])


@jit
def rms_norm_backward(g, x, weight, rrms, dx, dweight):
    """dx = rrms (gw - xhat mean(gw xhat)), xhat = x rrms; dweight gathers g xhat."""
    d = x.shape[1]
    for r in range(x.shape[0]):
        inv = rrms[r]
        sum_gw_xhat = 0.0
        for c in range(d):
            gc = float(g[r, c])
            xhat = float(x[r, c]) * inv
            sum_gw_xhat += gc * float(weight[c]) * xhat
            dweight[c] += gc * xhat
        mean_gw_xhat = sum_gw_xhat / d
        for c in range(d):
            xhat = float(x[r, c]) * inv
            dx[r, c] = inv * (float(g[r, c]) * float(weight[c]) - xhat * mean_gw_xhat)


@jit
def batch_norm(x, weight, bias, eps, out, mean, invstd, var):
    """Training BatchNorm of x (N, C, S) over N and S for each channel: writes the output, and
    each channel's mean, 1 / sqrt(var + eps) and biased variance (for the running one)."""
    count = x.shape[0] * x.shape[2]
    for c in range(x.shape[1]):
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


@jit
def batch_norm_backward(g, x, weight, mean, invstd, dx, dweight, dbias):
    """dx = w invstd (g - mean(g) - xhat mean(g xhat)) over each channel's N S values,
    xhat = (x - mean) invstd; dweight = sum g xhat, dbias = sum g (float64)."""
    count = x.shape[0] * x.shape[2]
    for c in range(x.shape[1]):
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
