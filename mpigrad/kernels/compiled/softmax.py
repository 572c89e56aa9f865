"""softmax, log_softmax and cross-entropy over the rows of a (rows, C) array, forward and
backward; each row is read in a few passes while it is in cache and written once.

Sums and the log-sum-exp are in float64 whatever the input (see _math.py). Rows are split
among threads (see _threads.py); each row is computed as on one thread. A row's
exponentials are written to a float64 row and summed in a second loop (row_sum's four
partial sums): a sum carried through the exponentials' loop keeps it from vectorising,
which made cross-entropy ten times torch's time.
"""
import math

import numpy as np
from numba import prange

from ._math import exp, exp_f32, jit, lanes_sum, row_max, row_sum
from ._threads import parallel


@jit
def _top(x, r):
    """The row's maximum, 0 for a row that is -inf everywhere (its softmax is then nan, as
    torch's is)."""
    top = row_max(x[r])
    return 0.0 if top == -np.inf else top


@jit
def _shifted_exp_sum(x, r, top, space):
    """sum_c e**(x[r, c] - top) in float64; the exponentials are left in `space`."""
    for c in range(x.shape[1]):
        space[c] = exp(float(x[r, c]) - top)
    return row_sum(space)


@parallel(rows=("x", "out"))
def softmax(x, out):
    for r in prange(x.shape[0]):
        top = _top(x, r)
        space = np.empty(x.shape[1])
        scale = 1.0 / _shifted_exp_sum(x, r, top, space)
        for c in range(x.shape[1]):
            out[r, c] = space[c] * scale


@parallel(rows=("x", "out"))
def log_softmax(x, out):
    for r in prange(x.shape[0]):
        top = _top(x, r)
        log_total = math.log(_shifted_exp_sum(x, r, top, np.empty(x.shape[1])))
        for c in range(x.shape[1]):
            # (x - top) - log_total, in torch's order: x - (top + log_total) loses the
            # small term when top is large
            out[r, c] = (float(x[r, c]) - top) - log_total


@parallel(rows=("g", "y", "out"))
def softmax_backward(g, y, out):
    for r in prange(y.shape[0]):
        dot = 0.0
        for c in range(y.shape[1]):
            dot += float(g[r, c]) * float(y[r, c])
        for c in range(y.shape[1]):
            out[r, c] = float(y[r, c]) * (float(g[r, c]) - dot)


@parallel(rows=("g", "y", "out"))
def log_softmax_backward(g, y, out):
    for r in prange(y.shape[0]):
        total = row_sum(g[r])
        for c in range(y.shape[1]):
            out[r, c] = float(g[r, c]) - exp(float(y[r, c])) * total


@jit
def _log_sum_exp(x, r, top, in_float64, space):
    """log of the row's sum of e**(x - top), top the row's maximum: the shifted scores x - top
    are then subtracted from first, as in torch's log_softmax. float32 rows take their
    exponentials in float32 arithmetic, as torch does (the sum stays float64, added in vector
    lanes: a sum in four scalar partial sums took as long as the exponentials). `space`
    (x's dtype, a row long) receives the exponentials."""
    if in_float64:
        return math.log(_shifted_exp_sum(x, r, top, space))
    row, narrow_top = x[r], np.float32(top)
    for c in range(x.shape[1]):
        space[c] = exp_f32(np.float32(row[c] - narrow_top))
    return math.log(lanes_sum(space))


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
