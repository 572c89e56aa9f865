"""softmax, log_softmax and cross-entropy over the rows of a (rows, C) array, forward and
backward; each row is read in a few passes while it is in cache and written once.

Sums and the log-sum-exp are in float64 whatever the input (see _math.py); float32 rows
take their exponentials and per-element arithmetic in float32, as torch does. Rows are split
among threads (see _threads.py); each row is computed as on one thread. A row's
exponentials are written to a row of scratch and summed in a second loop, in vector lanes: a
sum carried through the exponentials' loop keeps it from vectorising, which made
cross-entropy ten times torch's time.
"""
import math

import numpy as np
from numba import prange

from ._math import exp, exp_f32, jit, lanes_jit, lanes_sum, row_max
from ._threads import parallel


@jit
def _top(x, r):
    """The row's maximum, 0 for a row that is -inf everywhere (its softmax is then nan, as
    torch's is)."""
    top = row_max(x[r])
    return 0.0 if top == -np.inf else top


@jit
def _exp_sum(x, r, top, in_float64, space):
    """The row's sum of e**(x - top), top its maximum, in float64 added in vector lanes (four
    scalar partial sums took as long as the exponentials); the exponentials, in x's dtype,
    are left in `space` (a row long). float32 rows take them in float32 arithmetic, as
    torch does. Each exponential is written first and the row summed after: a sum carried
    through the exponentials' loop keeps it from vectorising."""
    row = x[r]
    if in_float64:
        for c in range(x.shape[1]):
            space[c] = exp(row[c] - top)
    else:
        narrow_top = np.float32(top)
        for c in range(x.shape[1]):
            space[c] = exp_f32(np.float32(row[c] - narrow_top))
    return lanes_sum(space)


@jit
def _log_sum_exp(x, r, top, in_float64, space):
    """log of the row's sum of e**(x - top) (see _exp_sum): the shifted scores x - top are
    then subtracted from first, as in torch's log_softmax."""
    return math.log(_exp_sum(x, r, top, in_float64, space))


# softmax and log_softmax run as cross-entropy does (its notes below): float32 exponentials
# and lane sums, one row of scratch per call. (1024, 1000) float32, one thread, forward and
# backward: softmax took 2.97 and 2.20 ms against torch's 1.17 and 0.89 with float64
# exponentials, scalar partial sums and a scratch row allocated per row.
@parallel(rows=("x", "out"))
def softmax(x, in_float64, out):
    space = np.empty(x.shape[1], x.dtype)
    for r in prange(x.shape[0]):
        top = _top(x, r)
        scale = x.dtype.type(1.0 / _exp_sum(x, r, top, in_float64, space))
        row = out[r]
        for c in range(x.shape[1]):
            row[c] = space[c] * scale


@parallel(rows=("x", "out"))
def log_softmax(x, in_float64, out):
    space = np.empty(x.shape[1], x.dtype)
    for r in prange(x.shape[0]):
        top = _top(x, r)
        log_total = _log_sum_exp(x, r, top, in_float64, space)
        row, source = out[r], x[r]
        for c in range(x.shape[1]):
            # (x - top) - log_total, in torch's order: x - (top + log_total) loses the
            # small term when top is large
            row[c] = (float(source[c]) - top) - log_total


@lanes_jit
def _dot(a, b):
    total = 0.0
    for c in range(a.shape[0]):
        total += float(a[c]) * float(b[c])
    return total


@parallel(rows=("g", "y", "out"))
def softmax_backward(g, y, out):
    """out = y (g - sum g y), the sum in float64 lanes, the rest in y's dtype."""
    for r in prange(y.shape[0]):
        dot = y.dtype.type(_dot(g[r], y[r]))
        row, gradient, probabilities = out[r], g[r], y[r]
        for c in range(y.shape[1]):
            row[c] = probabilities[c] * (gradient[c] - dot)


@parallel(rows=("g", "y", "out"))
def log_softmax_backward(g, y, in_float64, out):
    """out = g - e**y sum g, the sum in float64 lanes; float32 rows in float32 arithmetic."""
    for r in prange(y.shape[0]):
        row, gradient, logs = out[r], g[r], y[r]
        total = lanes_sum(gradient)
        if in_float64:
            for c in range(y.shape[1]):
                row[c] = gradient[c] - exp(logs[c]) * total
        else:
            narrow = np.float32(total)
            for c in range(y.shape[1]):
                row[c] = gradient[c] - exp_f32(logs[c]) * narrow


@jit
def _scaled_probabilities_into(out, row, top, log_total, scale, in_float64):
    """out = scale * softmax of the row, from its log-sum-exp (top + log_total): in float32
    arithmetic for float32 rows (see _log_sum_exp). Its own loop per case: a choice inside
    one loop kept it scalar."""
    if in_float64:
        for c in range(out.shape[0]):
            out[c] = scale * exp((row[c] - top) - log_total)
    else:
        t, lt, s = np.float32(top), np.float32(log_total), np.float32(scale)
        for c in range(out.shape[0]):
            out[c] = s * exp_f32((row[c] - t) - lt)


# Cross-entropy of a float32 input computes in float32 arithmetic (its exponentials and the
# backward's gradient; sums stay float64), no further from float64 than torch's float32
# result (tests/kernels/test_softmax.py); float64 inputs stay in float64. Forward and
# backward on (700, 1000), one thread: 2.7 -> 1.7 ms with float32 exponentials, then
# 1.98 -> 1.05 ms with the vectorised maximum, lane sums and a float32 backward (torch 1.0-1.1).
@parallel(rows=("x", "target", "out", "tops", "log_totals"))
def cross_entropy(x, target, weight, ignore_index, smoothing, in_float64, out, tops,
                  log_totals):
    """Per row: (1 - s) w[t] (lse - x[t]) + s / C sum_c w[c] (lse - x[c]); 0 where t is
    ignore_index (torch's formula). `weight` holds C ones when none is given. Each row's
    log-sum-exp is left in tops + log_totals (0 on ignored rows) for the backward."""
    classes = x.shape[1]
    # One row's scratch for the whole call, not one per row (that took a third of a
    # (1024, 96) forward): threads run this loop on ranges of rows, each range a call.
    space = np.empty(classes, x.dtype)
    for r in prange(x.shape[0]):
        t = target[r]
        loss = 0.0
        top = log_total = 0.0
        if t != ignore_index:
            top = _top(x, r)
            log_total = _log_sum_exp(x, r, top, in_float64, space)
            loss = (1.0 - smoothing) * float(weight[t]) * (log_total - (float(x[r, t]) - top))
            if smoothing > 0.0:
                spread = 0.0
                for c in range(classes):
                    spread += float(weight[c]) * (log_total - (float(x[r, c]) - top))
                loss += smoothing / classes * spread
        out[r] = loss
        tops[r] = top
        log_totals[r] = log_total


@parallel(rows=("g", "x", "target", "tops", "log_totals", "out"))
def cross_entropy_backward(g, x, target, weight, ignore_index, smoothing, in_float64, tops,
                           log_totals, out):
    """d/dx[c] = g ((1 - s) w[t] (p[c] - [c = t]) + s / C (W p[c] - w[c])), W = sum w, with
    the rows' log-sum-exps the forward left in tops and log_totals: out = a p - b w, a = g
    ((1 - s) w[t] + s W / C), b = g s / C, then g (1 - s) w[t] taken from out[t]."""
    classes = x.shape[1]
    total_weight = 0.0
    for c in range(classes):
        total_weight += float(weight[c])
    for r in prange(x.shape[0]):
        t = target[r]
        row = out[r]
        if t == ignore_index:
            row[:] = 0
            continue
        gr = float(g[r])
        picked = gr * (1.0 - smoothing) * float(weight[t])
        spread = gr * smoothing / classes
        _scaled_probabilities_into(row, x[r], tops[r], log_totals[r],
                                   picked + spread * total_weight, in_float64)
        if spread != 0.0:
            narrow = x.dtype.type(spread)
            for c in range(classes):
                row[c] -= narrow * weight[c]
        row[t] = float(row[t]) - picked
