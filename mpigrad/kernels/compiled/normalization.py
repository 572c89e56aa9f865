"""LayerNorm and RMSNorm over the rows of a (rows, D) array, forward and backward: each row's
statistics in float64 while the row is in cache, then one write per element. The backward
recomputes a row's mean and rstd from x (one read of a row that it reads anyway) rather
than keeping them from the forward. `weight` and `bias` hold D ones / zeros when absent."""
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
def layer_norm(x, weight, bias, eps, out):
    for r in range(x.shape[0]):
        mean, var = _moments(x, r)
        rstd = 1.0 / math.sqrt(var + eps)
        for c in range(x.shape[1]):
            out[r, c] = (float(x[r, c]) - mean) * rstd * float(weight[c]) + float(bias[c])


@jit
def layer_norm_backward(g, x, weight, eps, dx, dweight, dbias):
    """dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g w, xhat = (x - mean) rstd;
    dweight and dbias (float64, zeroed by the caller) gather g xhat and g over rows."""
    d = x.shape[1]
    for r in range(x.shape[0]):
        mean, var = _moments(x, r)
        rstd = 1.0 / math.sqrt(var + eps)
        sum_gw = 0.0
        sum_gw_xhat = 0.0
        for c in range(d):
            gc = float(g[r, c])
            xhat = (float(x[r, c]) - mean) * rstd
            gw = gc * float(weight[c])
            sum_gw += gw
            sum_gw_xhat += gw * xhat
            dweight[c] += gc * xhat
            dbias[c] += gc
        mean_gw = sum_gw / d
        mean_gw_xhat = sum_gw_xhat / d
        for c in range(d):
            xhat = (float(x[r, c]) - mean) * rstd
            dx[r, c] = rstd * (float(g[r, c]) * float(weight[c]) - mean_gw - xhat * mean_gw_xhat)


@jit
def _rrms(x, r, eps):
    total = 0.0
    for c in range(x.shape[1]):
        v = float(x[r, c])
        total += v * v
    return 1.0 / math.sqrt(total / x.shape[1] + eps)


@jit
def rms_norm(x, weight, eps, out):
    for r in range(x.shape[0]):
        rrms = _rrms(x, r, eps)
        for c in range(x.shape[1]):
            out[r, c] = float(x[r, c]) * rrms * float(weight[c])


@jit
def rms_norm_backward(g, x, weight, eps, dx, dweight):
    """dx = rrms (gw - xhat mean(gw xhat)), xhat = x rrms; dweight gathers g xhat."""
    d = x.shape[1]
    for r in range(x.shape[0]):
        rrms = _rrms(x, r, eps)
        sum_gw_xhat = 0.0
        for c in range(d):
            gc = float(g[r, c])
            xhat = float(x[r, c]) * rrms
            sum_gw_xhat += gc * float(weight[c]) * xhat
            dweight[c] += gc * xhat
        mean_gw_xhat = sum_gw_xhat / d
        for c in range(d):
            xhat = float(x[r, c]) * rrms
            dx[r, c] = rrms * (float(g[r, c]) * float(weight[c]) - xhat * mean_gw_xhat)
