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

from ._math import exp, exp_f32, jit, row_max, row_sum
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
def _log_sum_exp(x, r, in_float64):
    """The row's log-sum-exp as (top, log of the shifted sum): the shifted scores x - top
    are then subtracted from first, as in torch's log_softmax. float32 rows take their
    exponentials in float32 arithmetic, as torch does (the sum stays float64)."""
    top = _top(x, r)
    if in_float64:
        return top, math.log(_shifted_exp_sum(x, r, top, np.empty(x.shape[1])))
    row, narrow_top = x[r], np.float32(top)
    space = np.empty(x.shape[1], np.float32)
    for c in range(x.shape[1]):
        space[c] = exp_f32(np.float32(row[c] - narrow_top))
    return top, math.log(row_sum(space))


@jit
def _probabilities_into(space, x, r, top, log_total, in_float64):
    """The row's softmax from its log-sum-exp, in float32 arithmetic for float32 rows (see
    _log_sum_exp). Its own loop per case: a choice inside one loop kept it scalar."""
    row = x[r]
    if in_float64:
        for c in range(space.shape[0]):
            space[c] = exp((row[c] - top) - log_total)
    else:
        for c in range(space.shape[0]):
            space[c] = exp_f32(np.float32((float(row[c]) - top) - log_total))


# Cross-entropy of a float32 input takes its exponentials in float32 arithmetic (forward and
# backward on (700, 1000): 2.7 -> 1.7 ms; torch 1.0-1.4), no further from float64 than
# torch's float32 result (tests/kernels/test_softmax.py); float64 inputs stay in float64.
@parallel(rows=("x", "target", "out", "tops", "log_totals"))
def cross_entropy(x, target, weight, ignore_index, smoothing, in_float64, out, tops,
                  log_totals):
    """Per row: (1 - s) w[t] (lse - x[t]) + s / C sum_c w[c] (lse - x[c]); 0 where t is
    ignore_index (torch's formula). `weight` holds C ones when none is given. Each row's
    log-sum-exp is left in tops + log_totals (0 on ignored rows) for the backward."""
    classes = x.shape[1]
    for r in prange(x.shape[0]):
        t = target[r]
        loss = 0.0
        top = log_total = 0.0
        if t != ignore_index:
            top, log_total = _log_sum_exp(x, r, in_float64)
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
    the rows' log-sum-exps the forward left in tops and log_totals."""
    classes = x.shape[1]
    total_weight = 0.0
    for c in range(classes):
        total_weight += float(weight[c])
    for r in prange(x.shape[0]):
        t = target[r]
        if t == ignore_index:
            for c in range(classes):
                out[r, c] = 0.0
        else:
            top, log_total = tops[r], log_totals[r]
            gr = float(g[r])
            picked = (1.0 - smoothing) * float(weight[t])
            spread = smoothing / classes
            p = np.empty(classes)
            _probabilities_into(p, x, r, top, log_total, in_float64)
            for c in range(classes):
                out[r, c] = gr * (picked * p[c] + spread * (total_weight * p[c]
                                                            - float(weight[c])))
            out[r, t] = float(out[r, t]) - gr * picked
