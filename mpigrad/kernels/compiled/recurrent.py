"""The LSTM's and GRU's gate arithmetic of one step, forward and (the LSTM) backward, in one
call each, instead of a numpy pass (and a temporary) per operation. The batch's rows are split
among threads (see _threads.py).

Each row is a run of short loops, each storing into one column block. One loop over all the
gates with six stores was never vectorised (7x slower): numba's arrays may alias, and LLVM
gives up on a loop needing more run-time overlap checks than its limit. A loop here loads at
most a few blocks and stores one, so it is vectorised behind a few checks.

`in_float64` (the outputs are float64) picks the math of each sigmoid and tanh. float64: the
sigmoid through `exp`, tanh through math.tanh (exact to an ulp; a scalar call). float32: both
in float32 arithmetic, as torch computes them, twice the lanes of float64 and no widening:
the sigmoid through `exp_f32`, tanh through `tanh_f32` below, each within a few float32 ulps
(tests/kernels/test_recurrent.py holds them to torch's float32 accuracy). The rest (the gate
sums aside, the cell's update and the backward's products) is in float64, rounded once when
stored. A step's per-row work arrays are one allocation per call, not one per row. A forward
step of 20 x 200 in float32: 42 -> 20 us, its backward 14.6 -> 11.5 us.
"""
import math

import numpy as np
from numba import prange

from ._blas import gemm
from ._math import exp, exp_f32, horner, jit
from ._threads import parallel

_ONE_F32, _TWO_F32 = np.float32(1.0), np.float32(2.0)
# tanh(u) = u + u^3 P(u^2) for |u| < _TANH_CENTRE_F32, P of degree 5 fitted to float64 tanh
# (relative error weighted; at most 5e-10 relative off); beyond, 1 - 2 / (e^2|u| + 1), whose
# cancellation near 0 (an absolute error of 6e-8, relatively large for small u) the centre
# piece avoids.
_TANH_CENTRE_F32 = np.float32(0.625)
_TANH_CENTRE = tuple(np.float32(c) for c in (
    -0.3333333128564372, 0.13333226063576115, -0.053949396666275885, 0.02171555269381452,
    -0.008214972289874459, 0.0021780235210175154))


@jit
def tanh_f32(u):
    """tanh of a float32 in float32 arithmetic, within a few ulps; vectorisable (both pieces
    are computed and one is selected; exp_f32 saturates, so large |u| gives +-1)."""
    v = u * u
    p = horner(_TANH_CENTRE, v)
    # copysign: at u = -0, u v p is +0 (p(0) < 0) and -0 + +0 rounds to +0; tanh(-0) is -0
    centre = math.copysign(u + u * v * p, u)
    a = abs(u)
    outer = _ONE_F32 - _TWO_F32 / (exp_f32(_TWO_F32 * a) + _ONE_F32)
    outer = outer if u >= np.float32(0.0) else -outer
    return centre if a < _TANH_CENTRE_F32 else outer


@jit
def _sigmoid_into(dst, x, h, bias, in_float64):
    if in_float64:
        for k in range(dst.shape[0]):
            dst[k] = 1.0 / (1.0 + exp(-(float(x[k]) + float(h[k]) + float(bias[k]))))
    else:
        for k in range(dst.shape[0]):
            dst[k] = _ONE_F32 / (_ONE_F32 + exp_f32(-np.float32(x[k] + h[k] + bias[k])))


@jit
def _tanh_of_sum_into(dst, x, h, bias, in_float64):
    if in_float64:
        for k in range(dst.shape[0]):
            dst[k] = math.tanh(float(x[k]) + float(h[k]) + float(bias[k]))
    else:
        for k in range(dst.shape[0]):
            dst[k] = tanh_f32(np.float32(x[k] + h[k] + bias[k]))


@jit
def _tanh_into(dst, u, in_float64):
    if in_float64:
        for k in range(dst.shape[0]):
            dst[k] = math.tanh(float(u[k]))
    else:
        for k in range(dst.shape[0]):
            dst[k] = tanh_f32(np.float32(u[k]))


@jit
def _lstm_row(x, h, bias, c_prev, in_float64, tanh_c, row):
    """One row's step into row (6 size): [h, c, i, f, g, o]. x, h (the hidden product) and
    bias (4 size) in torch's gate order i, f, g, o; c_prev the previous cell (size); tanh_c
    a work row (size)."""
    size = x.shape[0] // 4
    for j in (0, 1, 3):  # i, f, o
        block = slice(j * size, (j + 1) * size)
        _sigmoid_into(row[(2 + j) * size:(3 + j) * size], x[block], h[block], bias[block],
                      in_float64)
    block = slice(2 * size, 3 * size)
    _tanh_of_sum_into(row[4 * size:5 * size], x[block], h[block], bias[block], in_float64)
    c = row[size:2 * size]
    i, f, g, o = (row[2 * size:3 * size], row[3 * size:4 * size], row[4 * size:5 * size],
                  row[5 * size:])
    for k in range(size):
        c[k] = float(f[k]) * float(c_prev[k]) + float(i[k]) * float(g[k])
    _tanh_into(tanh_c, c, in_float64)
    for k in range(size):
        row[k] = float(o[k]) * tanh_c[k]


@parallel(rows=("xg", "gh", "prev", "out"))
def lstm_step(xg, gh, bias, prev, in_float64, out):
    """xg, gh (n, 4 size) in torch's gate order i, f, g, o, bias (4 size) added to both;
    prev (n, *) the previous state, its last `size` columns the cell; out (n, 6 size)
    receives [h, c, i, f, g, o]."""
    size = xg.shape[1] // 4
    cell = prev.shape[1] - size
    tanh_c = np.empty((xg.shape[0], size))
    for r in prange(xg.shape[0]):
        _lstm_row(xg[r], gh[r], bias, prev[r, cell:], in_float64, tanh_c[r], out[r])


@jit
def _lstm_backward_row(d_h, g_c, carry_c, row, c_prev, in_float64, scratch, d_pre):
    """One row's step back: d_h (size) the gradient reaching its (unprojected) hidden output,
    g_c and carry_c (size) the two parts of the gradient reaching the cell (carry_c replaced
    by the part reaching the previous cell, d_c f), row the saved [.., c, i, f, g, o] (its
    last 5 size columns), c_prev the previous cell; writes d_pre (4 size), the gradient of
    the gates' pre-activations. scratch: (2, size) work."""
    size = c_prev.shape[0]
    base = row.shape[0] - 5 * size  # where the saved cell starts (after h, maybe projected)
    c = row[base:base + size]
    i, f, gg, o = (row[base + size:base + 2 * size], row[base + 2 * size:base + 3 * size],
                   row[base + 3 * size:base + 4 * size], row[base + 4 * size:])
    tc, dc = scratch[0], scratch[1]
    _tanh_into(tc, c, in_float64)
    for k in range(size):
        ok = float(o[k])
        dc[k] = (float(g_c[k]) + float(carry_c[k])
                 + float(d_h[k]) * ok * (1.0 - tc[k] * tc[k]))
    d_i, d_f, d_g, d_o = (d_pre[:size], d_pre[size:2 * size], d_pre[2 * size:3 * size],
                          d_pre[3 * size:])
    for k in range(size):
        ok = float(o[k])
        d_o[k] = float(d_h[k]) * tc[k] * (ok * (1.0 - ok))
    for k in range(size):
        ik = float(i[k])
        d_i[k] = dc[k] * float(gg[k]) * (ik * (1.0 - ik))
    for k in range(size):
        fk = float(f[k])
        d_f[k] = dc[k] * float(c_prev[k]) * (fk * (1.0 - fk))
    for k in range(size):
        gk = float(gg[k])
        d_g[k] = dc[k] * float(i[k]) * (1.0 - gk * gk)
    for k in range(size):
        carry_c[k] = dc[k] * float(f[k])


@parallel(rows=("d_h", "g", "carry", "ans", "prev", "d_pre"))
def lstm_backward_step(d_h, g, carry, ans, prev, in_float64, d_pre):
    """One step of the LSTM's backward from its saved row: ans (n, width + 4 size) holds
    [h, c, i, f, g, o] (h of width - size columns, projected or not), prev (n, width) the
    previous state. d_h (n, size): the gradient reaching the step's (unprojected) hidden
    output; the cell's gradient is g's plus carry's, columns width - size on. Writes d_pre
    (n, 4 size), the gradient of the gates' pre-activations, and replaces carry's cell
    columns with the gradient reaching the previous cell (d_c f)."""
    size = d_h.shape[1]
    width = prev.shape[1]
    cell = width - size
    scratch = np.empty((d_h.shape[0], 2, size))  # tanh(c) and d_c of each row
    for r in prange(d_h.shape[0]):
        _lstm_backward_row(d_h[r], g[r, cell:width], carry[r, cell:], ans[r], prev[r, cell:],
                           in_float64, scratch[r], d_pre[r])


# ----------------------------------------------------------------------------- whole recurrences
# An LSTM layer without a projection, all its steps in one call: per step the hidden product
# (BLAS's gemm, by column blocks of `width` columns, each summed over pieces of `depth` rows
# of the weight (kernels/numpy/recurrent.py picks both) and written where it belongs:
# _blas.py) and the gates, as lstm_step and lstm_backward_step compute them, with no Python
# between the steps (a step's calls, slices and copies took about 10 us, 1.4 ms of the word
# LM's step).
#
# On threads, each step is two regions: the product's column blocks shared out, then the
# gates' rows; the region's end is the barrier the next part waits for (the gates need every
# block, the next product every row). Each block and row is computed by the serial loop's
# code, so the bits do not depend on the thread count. Threaded only when the product is cut
# in blocks, i.e. BLAS runs on one thread (a few rows: kernels/numpy/recurrent.py); a wide
# batch's product is one block that BLAS threads itself. The word LM's layer (20 x 200, 35
# steps) on two threads: forward 3.35 -> 2.1 ms, backward 4.2 -> 2.6-3.3 ms.

def _step_work(state, w, width):
    """Multiply-adds of one step's hidden product (state: a row per sequence) when it is cut
    in blocks of `width` columns, else 0."""
    return state.shape[0] * w.size if width < w.shape[1] else 0


# Two threads pay from about a million multiply-adds a step (two regions of a few us each
# against 20 us of work saved per million).
_STEP_GRAIN = 1 << 19


@jit
def _product_block(x, x_first, n, w, q, width, depth, out):
    """Block q of out[:n] = x[x_first:x_first + n] w, w (K, N) C-contiguous: its columns
    q width to (q + 1) width (the last block narrower), which BLAS writes in place, one piece
    of `depth` rows of w after another (the first writes, the rest add, always in this
    order). x's and out's rows may be a wider array's (each row contiguous)."""
    inner, columns = w.shape
    first = q * width
    x_rows, out_rows = x.strides[0] // x.itemsize, out.strides[0] // out.itemsize
    for k in range(0, inner, depth):
        gemm(n, min(width, columns - first), min(depth, inner - k), 1.0, x, x_first * x_rows + k,
             x_rows, False, w, k * columns + first, columns, False, 0.0 if k == 0 else 1.0, out,
             first, out_rows)


@jit
def step_product(x, w, width, depth, out):
    """out = x w by _product_block's blocks, for the recurrences that still step from Python
    (kernels/numpy/recurrent.py's StepProduct)."""
    for q in range(-(-w.shape[1] // width)):
        _product_block(x, 0, x.shape[0], w, q, width, depth, out)


@parallel(grain=_STEP_GRAIN, work=lambda h, w_t, width, **_: _step_work(h, w_t, width))
def lstm_forward(xg, bias, steps, in_float64, h, c, out, gh, w_t, width, depth):
    """xg (rows, 4 size) the input projections, bias (4 size), steps (T, 2) each step's
    first row and row count in running order; h and c (batch, size) the state, updated in
    place; out (rows, 6 size) receives [h, c, i, f, g, o] per row; w_t W_hh^T (size,
    4 size), multiplied by column blocks of `width` in pieces of `depth`. gh (batch, 4 size):
    work."""
    size = c.shape[1]
    tanh_c = np.empty((h.shape[0], size))
    for s in range(steps.shape[0]):
        start, n = steps[s, 0], steps[s, 1]
        for q in prange(-(-w_t.shape[1] // width)):
            _product_block(h, 0, n, w_t, q, width, depth, gh)
        for r in prange(n):
            row, h_r, c_r = out[start + r], h[r], c[r]
            _lstm_row(xg[start + r], gh[r], bias, c_r, in_float64, tanh_c[r], row)
            for k in range(size):
                h_r[k] = row[k]
                c_r[k] = row[size + k]


@parallel(grain=_STEP_GRAIN, work=lambda carry, w, width, **_: _step_work(carry, w, width))
def lstm_backward(g, ans, prev, extra, steps, in_float64, carry, d_pre, w, width, depth):
    """The backward of lstm_forward. g and ans (rows, 6 size) the gradient reaching and the
    value of each output row, prev (rows, 2 size) each row's previous state, extra (rows,
    4 size, or no rows) a gradient added to d_pre (the saved columns' own); w W_hh (4 size,
    size), multiplied as lstm_forward's. Steps go last to first; carry (batch,
    2 size), the gradient reaching each sequence's [h, c] from the steps after, starts as
    zeros and ends as the initial state's; d_pre (rows, 4 size) receives the gates'
    pre-activations' gradient."""
    size = carry.shape[1] // 2
    d_h = np.empty((carry.shape[0], size))
    scratch = np.empty((carry.shape[0], 2, size))  # tanh(c), d_c of each row
    for s in range(steps.shape[0] - 1, -1, -1):
        start, n = steps[s, 0], steps[s, 1]
        for r in prange(n):
            g_r, carry_r, d, d_h_r = g[start + r], carry[r], d_pre[start + r], d_h[r]
            for k in range(size):
                d_h_r[k] = float(g_r[k]) + float(carry_r[k])
            _lstm_backward_row(d_h_r, g_r[size:2 * size], carry_r[size:], ans[start + r],
                               prev[start + r, size:], in_float64, scratch[r], d)
            if extra.shape[0]:
                e = extra[start + r]
                for k in range(4 * size):
                    d[k] += e[k]
        for q in prange(-(-w.shape[1] // width)):
            _product_block(d_pre, start, n, w, q, width, depth, carry)


@parallel(rows=("xg", "gh", "h_prev", "out"))
def gru_step(xg, gh, bias, h_prev, in_float64, out):
    """xg, gh (n, 3 size) in torch's gate order r, z, n, bias (3 size) added to gh; h_prev
    (n, size); out (n, 5 size) receives [h, r, z, n, hidden_n] with hidden_n = gh_n + bias_n,
    n = tanh(xg_n + r hidden_n), h = n + z (h_prev - n)."""
    size = h_prev.shape[1]
    candidates = np.empty((xg.shape[0], size))  # each row's n, before it is stored
    for r in prange(xg.shape[0]):
        x, h, row = xg[r], gh[r], out[r]
        for j in (0, 1):  # r, z
            block = slice(j * size, (j + 1) * size)
            _sigmoid_into(row[(1 + j) * size:(2 + j) * size], x[block], h[block], bias[block],
                          in_float64)
        reset, update, hidden_n = row[size:2 * size], row[2 * size:3 * size], row[4 * size:]
        h_n, b_n, x_n = h[2 * size:], bias[2 * size:], x[2 * size:]
        for k in range(size):
            hidden_n[k] = float(h_n[k]) + float(b_n[k])
        n = candidates[r]
        for k in range(size):
            n[k] = float(x_n[k]) + float(reset[k]) * float(hidden_n[k])
        _tanh_into(n, n, in_float64)
        row[3 * size:4 * size] = n
        hp = h_prev[r]
        for k in range(size):
            row[k] = n[k] + float(update[k]) * (float(hp[k]) - n[k])


@parallel(rows=("g", "carry_mm", "carry_z", "ans", "h_prev", "d_xg", "d_gh"))
def gru_backward_step(g, carry_mm, carry_z, ans, h_prev, d_xg, d_gh):
    """One step of the GRU's backward from its saved row: ans (n, 5 size) holds
    [h, r, z, n, hidden_n], h_prev (n, size) the previous state. The gradient reaching h is
    g's first size columns plus carry_mm's and carry_z's (the next step's d_gh W_hh and
    d_h z). Writes the gradients of the input and hidden projections' parts d_xg and d_gh
    (n, 3 size), and replaces carry_z with this step's d_h z."""
    size = h_prev.shape[1]
    scratch = np.empty((g.shape[0], 2, size))  # d_h and d_n of each row
    for r in prange(g.shape[0]):
        row, hp = ans[r], h_prev[r]
        reset, update, n, hidden_n = (row[size:2 * size], row[2 * size:3 * size],
                                      row[3 * size:4 * size], row[4 * size:])
        gr, mm, zc = g[r], carry_mm[r], carry_z[r]
        xr, hr = d_xg[r], d_gh[r]
        d_h, d_n = scratch[r, 0], scratch[r, 1]
        for k in range(size):
            d_h[k] = float(gr[k]) + float(mm[k]) + float(zc[k])
        for k in range(size):
            nk = float(n[k])
            d_n[k] = d_h[k] * (1.0 - float(update[k])) * (1.0 - nk * nk)
        for k in range(size):
            xr[2 * size + k] = d_n[k]
        for k in range(size):
            hr[2 * size + k] = d_n[k] * float(reset[k])
        for k in range(size):
            zk = float(update[k])
            xr[size + k] = d_h[k] * (float(hp[k]) - float(n[k])) * (zk * (1.0 - zk))
        for k in range(size):
            rk = float(reset[k])
            xr[k] = d_n[k] * float(hidden_n[k]) * (rk * (1.0 - rk))
        hr[:2 * size] = xr[:2 * size]
        for k in range(size):
            zc[k] = d_h[k] * float(update[k])
