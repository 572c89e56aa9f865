"""LayerNorm and RMSNorm over the rows of a (rows, D) array, and BatchNorm over the channels
of an (N, C, S) array, forward and backward. Statistics (each row's or channel's sums) are
taken in float64. A forward writes the statistics its backward needs (mean and rstd per row,
or per channel), and the backward reads them rather than computing them from x again.
`weight` and `bias` hold ones / zeros when absent. A LayerNorm or RMSNorm row is short (a
GPT's 128 features), so its sums are added in vector lanes (`lanes_jit`); with one scalar
addition per element they took twice torch's time.

LayerNorm's and RMSNorm's per-element arithmetic (the output, the input's gradient, each
row's weight-gradient terms) runs in x's dtype, as torch's does: in float32 twice the vector
lanes of float64 and no widening. A (1024, 128) float32 forward took 81 -> 48 us, its
backward 110 -> 79 us (one thread; the backward also became one pass, below).

Threads (see _threads.py) take whole rows (the norms' forwards) or whole channels
(BatchNorm), each computed as on one thread. The norms' backward takes chunks of
CHUNK_ROWS rows: one pass over a chunk writes its rows' dx and the chunk's own sums of
their weight- and bias-gradient terms, which the caller adds up in chunk order; so the
result is the same bits however many threads ran, and g and x are read once (two passes,
the second over column blocks, took 121 us on one thread and 122 us on two)."""
import math

from numba import prange

from ._math import lanes_jit, lanes_sum
from ._threads import parallel

CHUNK_ROWS = 32  # rows per partial sum of the norms' weight and bias gradients


@lanes_jit
def _squared_deviations_sum(row, mu):
    total = 0.0
    for c in range(row.shape[0]):
        total += (float(row[c]) - mu) ** 2
    return total


@parallel(rows=("x", "out", "mean", "rstd"))
def layer_norm(x, weight, bias, eps, out, mean, rstd):
    d = x.shape[1]
    for r in prange(x.shape[0]):
        row = x[r]
        mu = lanes_sum(row) / d
        inv = 1.0 / math.sqrt(_squared_deviations_sum(row, mu) / d + eps)
        mean[r] = mu
        rstd[r] = inv
        out_row = out[r]
        m, i = x.dtype.type(mu), x.dtype.type(inv)  # rounded once to x's dtype
        for c in range(d):
            out_row[c] = (row[c] - m) * i * weight[c] + bias[c]


@parallel(rows=("x", "out", "rrms"))
def rms_norm(x, weight, eps, out, rrms):
    d = x.shape[1]
    for r in prange(x.shape[0]):
        row = x[r]
        inv = 1.0 / math.sqrt(_squared_deviations_sum(row, 0.0) / d + eps)
        rrms[r] = inv
        out_row = out[r]
        i = x.dtype.type(inv)
        for c in range(d):
            out_row[c] = row[c] * i * weight[c]


@lanes_jit
def _gw_sums(g_row, x_row, weight, mu, inv):
    """sum_c g w and sum_c g w xhat over a row, xhat = (x - mu) inv."""
    sum_gw = 0.0
    sum_gw_xhat = 0.0
    for c in range(x_row.shape[0]):
        gw = float(g_row[c]) * float(weight[c])
        sum_gw += gw
        sum_gw_xhat += gw * ((float(x_row[c]) - mu) * inv)
    return sum_gw, sum_gw_xhat


@parallel()
def norm_backward(g, x, weight, mean, rstd, dx, partial_weight, partial_bias):
    """The backward of LayerNorm (`mean` given) or RMSNorm (`mean` empty: xhat = x rstd, and
    no mean(gw) term): dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g w; and for each
    chunk k of CHUNK_ROWS rows, partial_weight[k] = its rows' sum of g xhat and (when
    partial_bias has columns) partial_bias[k] = their sum of g, both (chunks, D) in x's
    dtype."""
    d = x.shape[1]
    centered = mean.size > 0
    with_bias = partial_bias.shape[1] > 0
    for chunk in prange(partial_weight.shape[0]):
        # On 1-d rows, one array written per loop: so LLVM vectorises each (with the sums
        # in one loop over 2-d indices it did not: 4x slower).
        chunk_weight, chunk_bias = partial_weight[chunk], partial_bias[chunk]
        chunk_weight[:] = 0
        chunk_bias[:] = 0
        for r in range(chunk * CHUNK_ROWS, min(x.shape[0], (chunk + 1) * CHUNK_ROWS)):
            mu = mean[r] if centered else 0.0
            g_row, x_row, dx_row = g[r], x[r], dx[r]
            sum_gw, sum_gw_xhat = _gw_sums(g_row, x_row, weight, mu, rstd[r])
            m, inv = x.dtype.type(mu), x.dtype.type(rstd[r])
            mean_gw = x.dtype.type(sum_gw / d if centered else 0.0)
            mean_gw_xhat = x.dtype.type(sum_gw_xhat / d)
            for c in range(d):
                xhat = (x_row[c] - m) * inv
                dx_row[c] = inv * (g_row[c] * weight[c] - mean_gw - xhat * mean_gw_xhat)
            for c in range(d):
                chunk_weight[c] += g_row[c] * ((x_row[c] - m) * inv)
            if with_bias:
                for c in range(d):
                    chunk_bias[c] += g_row[c]


@parallel()
def batch_norm(x, weight, bias, eps, out, mean, invstd, var):
    """Training BatchNorm of x (N, C, S) over N and S for each channel: writes the output, and
    each channel's mean, 1 / sqrt(var + eps) and biased variance (for the running one). The
    sums are float64, in vector lanes (lanes_jit): four scalar partial sums took five times
    the time of a copy. The output's arithmetic is in x's dtype, as torch's is."""
    count = x.shape[0] * x.shape[2]
    for c in prange(x.shape[1]):
        total = 0.0
        for n in range(x.shape[0]):
            total += lanes_sum(x[n, c])
        mu = total / count
        spread = 0.0
        for n in range(x.shape[0]):
            spread += _squared_deviations_sum(x[n, c], mu)
        biased = spread / count
        inv = 1.0 / math.sqrt(biased + eps)
        mean[c] = mu
        invstd[c] = inv
        var[c] = biased
        m = x.dtype.type(mu)  # each rounded once to x's dtype
        scale = x.dtype.type(inv * float(weight[c]))
        shift = x.dtype.type(bias[c])
        for n in range(x.shape[0]):
            run, out_run = x[n, c], out[n, c]
            for s in range(x.shape[2]):
                out_run[s] = (run[s] - m) * scale + shift


@lanes_jit
def _gradient_sums(g, x, mu):
    """sum g and sum g (x - mu) over a run of one channel, in float64 vector lanes."""
    sum_g = 0.0
    sum_g_centered = 0.0
    for s in range(x.shape[0]):
        value = float(g[s])
        sum_g += value
        sum_g_centered += value * (float(x[s]) - mu)
    return sum_g, sum_g_centered


@parallel()
def batch_norm_backward(g, x, weight, mean, invstd, dx, dweight, dbias):
    """dx = w invstd (g - mean(g) - xhat mean(g xhat)) over each channel's N S values,
    xhat = (x - mean) invstd; dweight = sum g xhat, dbias = sum g (float64). dx's arithmetic
    is in x's dtype, from coefficients rounded once."""
    count = x.shape[0] * x.shape[2]
    for c in prange(x.shape[1]):
        mu = mean[c]
        inv = invstd[c]
        sum_g = 0.0
        sum_g_centered = 0.0
        for n in range(x.shape[0]):
            run_g, run_g_centered = _gradient_sums(g[n, c], x[n, c], mu)
            sum_g += run_g
            sum_g_centered += run_g_centered
        sum_g_xhat = sum_g_centered * inv
        dweight[c] = sum_g_xhat
        dbias[c] = sum_g
        scale = float(weight[c]) * inv
        # dx = scale g - scale mean(g) - scale inv mean(g xhat) (x - mu)
        m = x.dtype.type(mu)
        g_scale = x.dtype.type(scale)
        g_shift = x.dtype.type(scale * sum_g / count)
        x_scale = x.dtype.type(scale * inv * sum_g_xhat / count)
        for n in range(x.shape[0]):
            run_g, run_x, run_dx = g[n, c], x[n, c], dx[n, c]
            for s in range(x.shape[2]):
                run_dx[s] = g_scale * run_g[s] - g_shift - x_scale * (run_x[s] - m)
