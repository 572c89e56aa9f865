"""Recurrences: one layer of an RNN, GRU or LSTM in one direction over a whole sequence.

Each op takes the input projection of every step already computed (`xg`, one matmul for the
whole sequence, done by the caller), the initial state, and the recurrent weights; its forward
runs the time loop (per step one small product and, for the LSTM and GRU, one compiled call
for the gates; an LSTM without a projection runs its whole loop in one compiled call) and
returns the state after every step. The whole recurrence is one
graph node, so backward through time keeps no per-step Python objects at all.

Rows are in packed order (torch's PackedSequence layout): the `batch_sizes[t]` rows of step t
follow those of step t-1, and the sequences are sorted longest first, so step t updates the
first `batch_sizes[t]` sequences and the others keep their state. A padded (T, B) batch is the
case of equal batch sizes. `reverse=True` runs the steps last to first, each sequence starting
at its own last step.

The state is one row per sequence: `[h | c]` for the LSTM (h of the projected size when
`w_hr` is given), `h` otherwise. Each output row is the state after that step, followed for the
LSTM by its four gate activations, for the GRU by r, z, n and W_hn h + b_hn (the caller slices
the state off; the rest is kept for backward). The gradient and tangent rules compute, for all
rows at once, the coefficients of each step's Jacobian from the saved rows, so the sequential
part of either rule is a few products per step. The rules are written once over `ns`, a
namespace of numpy arrays or of Tensor ops: with Tensors they are differentiable
(create_graph, forward-over-reverse); with arrays, when no graph or tangent is being recorded,
the same arithmetic runs without the Tensor layer's cost per call. There the LSTM and the GRU
take their compiled backward instead (`_lstm_backward`, `_gru_backward`): one call per step
for the gates' gradient, one product for the state's carry (the whole loop in one call for
an LSTM without a projection).
"""
import functools

import numpy as np

from ..autograd import forward_ad, grad_mode
from ..kernels.numpy.activations import sigmoid as _sigmoid
from ..kernels.numpy.linalg import column_sums, linear_backward
from ..kernels.onednn import rnn as onednn_rnn
from ..kernels.numpy.recurrent import (StepProduct, compute_dtype, gru_backward_step, gru_step,
                                       lstm_backward_step, lstm_recurrence,
                                       lstm_recurrence_backward, lstm_step)
from ..tensor import Tensor
from .arithmetic import linear
from .core import Op
from .elementwise import sigmoid, sign, tanh
from .shape import cat, index_scatter


class _Arrays:
    cat = staticmethod(np.concatenate)
    tanh = staticmethod(np.tanh)
    sigmoid = staticmethod(_sigmoid)
    sign = staticmethod(np.sign)

    @staticmethod
    def zeros(shape, like):
        return np.zeros(shape, dtype=like.dtype)

    @staticmethod
    def result(array):
        return Tensor.wrap(array)

    @staticmethod
    def scatter(rows, index, shape):
        """Zeros of `shape` with `rows` at the rows `index` picks."""
        return index_scatter.forward(rows, index=index, shape=shape)


class _Tensors:
    cat = staticmethod(cat)
    tanh = staticmethod(tanh)
    sigmoid = staticmethod(sigmoid)
    sign = staticmethod(sign)

    @staticmethod
    def zeros(shape, like):
        return Tensor.wrap(np.zeros(shape, dtype=like.dtype))

    @staticmethod
    def result(tensor):
        return tensor

    @staticmethod
    def scatter(rows, index, shape):
        return index_scatter(rows, index=index, shape=shape)


def _namespace(values):
    """Arrays when nothing the rule computes needs recording (no graph, no dual tensors)."""
    if forward_ad._global.level is not None:
        return _Tensors
    if grad_mode.is_grad_enabled() and any(isinstance(v, Tensor) and v.requires_grad
                                           for v in values):
        return _Tensors
    return _Arrays


def _unwrap(ns, values):
    if ns is _Tensors:
        return values
    return [v._array if isinstance(v, Tensor) else v for v in values]


@functools.lru_cache(maxsize=256)
def _schedule(batch_sizes, reverse):
    """(steps, prev_rows): the steps as (first row, rows) in the order they run, and for every
    row the row of [states; initial states] holding its previous state."""
    offsets = np.concatenate([[0], np.cumsum(batch_sizes)])
    total = int(offsets[-1])
    prev_rows = np.empty(total, dtype=np.intp)
    for t, n in enumerate(batch_sizes):
        rows = slice(offsets[t], offsets[t] + n)
        source = t + 1 if reverse else t - 1
        if 0 <= source < len(batch_sizes):
            # Rows beyond the source step's batch start their sequence here, from the initial
            # state (only in reverse: forward, a step never has more rows than the one before).
            k = min(n, batch_sizes[source])
            prev_rows[rows] = np.concatenate([offsets[source] + np.arange(k),
                                              total + np.arange(k, n)])
        else:
            prev_rows[rows] = total + np.arange(n)
    prev_rows.flags.writeable = False
    steps = [(int(offsets[t]), n) for t, n in enumerate(batch_sizes)]
    return (steps[::-1] if reverse else steps), prev_rows


@functools.lru_cache(maxsize=256)
def _step_table(batch_sizes, reverse):
    """_schedule's steps as the whole-loop kernels take them: (T, 2) int64, each step's
    first row and row count in running order."""
    table = np.array(_schedule(batch_sizes, reverse)[0], np.int64).reshape(-1, 2)
    table.flags.writeable = False
    return table


def final_rows(batch_sizes, reverse):
    """Where each sequence's final state is among the op's output rows: its last step's row,
    or (reverse) its first step's. A slice when all sequences have the same length."""
    batch = batch_sizes[0]
    if reverse:
        return slice(0, batch)
    total = sum(batch_sizes)
    if batch_sizes[-1] == batch:
        return slice(total - batch, total)
    offsets = np.concatenate([[0], np.cumsum(batch_sizes)])
    lengths = (np.asarray(batch_sizes)[None, :] > np.arange(batch)[:, None]).sum(1)
    return offsets[lengths - 1] + np.arange(batch)


# ----------------------------------------------------------------------------- the cells
# Each kind says how one step maps (xg, gh = h W_hh^T, b_hh, previous state) to its output
# row (`step`, numpy, into the rows it is given): the new state, then for the LSTM and the
# GRU what backward needs of the step (the LSTM's gates i, f, g, o; the GRU's r, z, n and
# W_hn h + b_hn), saved so backward need not recompute them. `coefficients` gives every row's Jacobian coefficients at once (by
# name), from which `backward_step` and `tangent_step` take one step's gradient and tangent.
# The saved columns are outputs too: `saved_gradients` turns their gradient into the gradient
# of the step's input projection and hidden projection, and `tangent_step` gives their tangent.
class _Elman:
    def __init__(self, nonlinearity):
        self.relu = nonlinearity == "relu"

    def saved(self, w_hh):
        return 0

    def step(self, xg, gh, bias, prev, w_hr, out):
        np.add(xg, gh, out=out)
        np.add(out, bias, out=out)
        if self.relu:
            np.maximum(out, 0, out=out)
        else:
            np.tanh(out, out=out)

    def coefficients(self, ns, prev, ans, w_hh):
        # The derivative from the output alone: 1 - h^2 for tanh; for relu 1 where h > 0,
        # which is sign(h) as h >= 0, in h's dtype.
        return {"slope": ns.sign(ans) if self.relu else 1 - ans * ans}

    def backward_step(self, ns, c, d_new, extra, w_hh, w_hr):
        d_pre = d_new * c["slope"]
        return d_pre, d_pre, d_pre @ w_hh

    def tangent_step(self, ns, c, t_xg, t_gh, t_prev, w_hr, t_hr):
        return (t_xg + t_gh) * c["slope"]


class _GRU:
    def saved(self, w_hh):
        return w_hh.shape[0] // 3 * 4

    def step(self, xg, gh, bias, prev, w_hr, out):
        gru_step(xg, gh, bias, prev, out)  # [h, r, z, n, hidden_n], the gates in one pass

    def coefficients(self, ns, prev, ans, w_hh):
        size = prev.shape[1]
        r, z, n, hidden_n = (ans[:, (k + 1) * size:(k + 2) * size] for k in range(4))
        slope_r, slope_z, slope_n = r * (1 - r), z * (1 - z), 1 - n * n
        # d h'/d pre_r, d h'/d pre_z, d h'/d pre_n; pre_n's hidden part enters scaled by r.
        dn = (1 - z) * slope_n
        dz = (prev - n) * slope_z
        dr = dn * hidden_n * slope_r
        return {"to_xg": ns.cat([dr, dz, dn], 1), "to_gh": ns.cat([dr, dz, dn * r], 1), "z": z,
                "r": r, "hidden_n": hidden_n, "slope_r": slope_r, "slope_z": slope_z,
                "slope_n": slope_n, "h_minus_n": prev - n}

    def saved_gradients(self, ns, g_saved, c):
        size = c["z"].shape[1]
        g_r, g_z, g_n, g_hidden_n = (g_saved[:, k * size:(k + 1) * size] for k in range(4))
        to_n = g_n * c["slope_n"]
        to_r = (g_r + to_n * c["hidden_n"]) * c["slope_r"]
        to_z = g_z * c["slope_z"]
        return ns.cat([to_r, to_z, to_n], 1), ns.cat([to_r, to_z, to_n * c["r"] + g_hidden_n], 1)

    def backward_step(self, ns, c, d_new, extra, w_hh, w_hr):
        d3 = ns.cat([d_new, d_new, d_new], 1)
        d_xg, d_gh = d3 * c["to_xg"], d3 * c["to_gh"]
        if extra is not None:
            d_xg, d_gh = d_xg + extra[0], d_gh + extra[1]
        return d_xg, d_gh, d_gh @ w_hh + d_new * c["z"]

    def tangent_step(self, ns, c, t_xg, t_gh, t_prev, w_hr, t_hr):
        size = c["z"].shape[1]
        t_r = (t_xg[:, :size] + t_gh[:, :size]) * c["slope_r"]
        t_z = (t_xg[:, size:2 * size] + t_gh[:, size:2 * size]) * c["slope_z"]
        t_hidden_n = t_gh[:, 2 * size:]
        t_n = (t_xg[:, 2 * size:] + t_r * c["hidden_n"] + c["r"] * t_hidden_n) * c["slope_n"]
        t_h = (1 - c["z"]) * t_n + c["h_minus_n"] * t_z + c["z"] * t_prev
        return ns.cat([t_h, t_r, t_z, t_n, t_hidden_n], 1)


class _LSTM:
    def saved(self, w_hh):
        return w_hh.shape[0]

    def step(self, xg, gh, bias, prev, w_hr, out):
        if w_hr is None:
            lstm_step(xg, gh, bias, prev, out)  # [h, c, gates], the gates in one pass
            return
        size = gh.shape[1] // 4
        new = np.empty((out.shape[0], 6 * size), out.dtype)
        lstm_step(xg, gh, bias, prev, new)
        np.matmul(new[:, :size], w_hr.T, out=out[:, :w_hr.shape[0]])
        out[:, w_hr.shape[0]:] = new[:, size:]

    def coefficients(self, ns, prev, ans, w_hh):
        size, width = w_hh.shape[0] // 4, prev.shape[1]
        i, f, g, o = (ans[:, width + k * size:width + (k + 1) * size] for k in range(4))
        c_prev, tc = prev[:, -size:], ns.tanh(ans[:, width - size:width])
        # Each gate's slope (d activation / d pre); times d c'/d gate (i, f, g) or d h/d o.
        slopes = ns.cat([i * (1 - i), f * (1 - f), 1 - g * g, o * (1 - o)], 1)
        return {"gates": slopes * ns.cat([g, c_prev, i, tc], 1), "slopes": slopes,
                "h_by_c": o * (1 - tc * tc), "f": f, "h_raw": o * tc}

    def saved_gradients(self, ns, g_saved, c):
        to_pre = g_saved * c["slopes"]
        return to_pre, to_pre

    def backward_step(self, ns, c, d_new, extra, w_hh, w_hr):
        size = c["f"].shape[1]
        d_h = d_new[:, :-size]
        if w_hr is not None:
            d_h = d_h @ w_hr
        d_c = d_new[:, -size:] + d_h * c["h_by_c"]
        d_pre = ns.cat([d_c, d_c, d_c, d_h], 1) * c["gates"]
        if extra is not None:
            d_pre = d_pre + extra[0]
        return d_pre, d_pre, ns.cat([d_pre @ w_hh, d_c * c["f"]], 1)

    def tangent_step(self, ns, c, t_xg, t_gh, t_prev, w_hr, t_hr):
        size = c["f"].shape[1]
        t_pre = t_xg + t_gh
        parts = t_pre * c["gates"]
        t_c = (parts[:, :size] + parts[:, size:2 * size] + parts[:, 2 * size:3 * size]
               + c["f"] * t_prev[:, -size:])
        t_h = parts[:, 3 * size:] + c["h_by_c"] * t_c
        if w_hr is not None:
            t_h = t_h @ w_hr.T
            if t_hr is not None:  # the projection weight's own tangent
                t_h = t_h + t_hr
        return ns.cat([t_h, t_c, t_pre * c["slopes"]], 1)


# ----------------------------------------------------------------------------- the rules
def _forward(kind, xg, init, w_hh, b_hh, w_hr=None, *, batch_sizes, reverse):
    steps, _ = _schedule(batch_sizes, reverse)
    width, hidden = init.shape[1], w_hh.shape[1]
    dtype = np.result_type(xg, init, w_hh)
    # Everything a step touches is made once here in the compiled steps' form (contiguous,
    # one float dtype), so that a step is a product and a kernel call writing into `out`.
    work = compute_dtype(dtype)
    out = np.empty((xg.shape[0], width + kind.saved(w_hh)), work)
    if xg.shape[0] == 0:  # an empty batch; BLAS rejects a product of no rows
        return out.astype(dtype, copy=False)
    xg = np.ascontiguousarray(xg, work)
    bias = np.zeros(w_hh.shape[0], work) if b_hh is None else np.ascontiguousarray(b_hh, work)
    if isinstance(kind, _LSTM) and w_hr is None:  # the whole loop in one compiled call
        size = w_hh.shape[1]
        lstm_recurrence(xg, np.array(init[:, :size], work), np.array(init[:, size:], work),
                        w_hh.astype(work, copy=False), bias, _step_table(batch_sizes, reverse),
                        out)
        return out if work == dtype else out.astype(dtype)
    state = init.astype(work, copy=True)
    gh = np.empty((batch_sizes[0], w_hh.shape[0]), work)
    with StepProduct(w_hh.T.astype(work, copy=False), batch_sizes[0]) as hidden_product:
        for start, n in steps:
            rows, prev = slice(start, start + n), state[:n]
            hidden_product(prev[:, :hidden], gh[:n])
            kind.step(xg[rows], gh[:n], bias, prev, w_hr, out[rows])
            state[:n] = out[rows, :width]
    return out if work == dtype else out.astype(dtype)


def _recompute(ns, kind, ans, init, w_hh, batch_sizes, reverse):
    """Every row's previous state and its step's Jacobian coefficients, for all rows at once."""
    _, prev_rows = _schedule(batch_sizes, reverse)
    width = init.shape[1]
    states = ans[:, :width] if ans.shape[1] > width else ans
    prev = ns.cat([states, init], 0)[prev_rows]
    return prev[:, :w_hh.shape[1]], kind.coefficients(ns, prev, ans, w_hh)


def _rows(ns, blocks):
    """Per-step blocks (first row, block) back in row order, as one array."""
    blocks.sort(key=lambda block: block[0])
    return ns.cat([b for _, b in blocks], 0)


def _backward(kind, needs, g, ans, xg, init, w_hh, b_hh, w_hr=None, *, batch_sizes, reverse):
    ns = _namespace([g, ans, xg, init, w_hh, b_hh, w_hr])
    g, ans, xg, init, w_hh, b_hh, w_hr = _unwrap(ns, [g, ans, xg, init, w_hh, b_hh, w_hr])
    if ans.shape[0] == 0:  # an empty batch: zero gradients (BLAS rejects products of no rows)
        shapes = [(0, w_hh.shape[0]), init.shape, w_hh.shape, b_hh, w_hr]
        return [None if like is None or not need else
                ns.result(ns.zeros(like if type(like) is tuple else like.shape, ans))
                for need, like in zip(needs, shapes)]
    if ns is _Arrays and kind.saved(w_hh) and ans.dtype in (np.float32, np.float64):
        fused = _lstm_backward if isinstance(kind, _LSTM) else _gru_backward
        return fused(kind, needs, g, ans, init, w_hh, b_hh, w_hr, batch_sizes, reverse)
    steps, _ = _schedule(batch_sizes, reverse)
    h_prev, coefficients = _recompute(ns, kind, ans, init, w_hh, batch_sizes, reverse)
    width = init.shape[1]
    extra = None
    if kind.saved(w_hh):
        g_saved = g[:, width:]
        # Only the rule's own graph (double backward) reads the saved columns, so a plain
        # backward's gradient for them is zero and is skipped.
        if ns is _Tensors or g_saved.any():
            extra = kind.saved_gradients(ns, g_saved, coefficients)
    # carry[b]: the gradient reaching sequence b's state from the steps already taken back.
    carry = ns.zeros(init.shape, init)
    d_xg, d_gh, d_out = [], [], []
    for start, n in reversed(steps):
        rows = slice(start, start + n)
        d_new = g[rows, :width] + carry[:n]
        dx, dh, d_prev = kind.backward_step(
            ns, {name: c[rows] for name, c in coefficients.items()}, d_new,
            None if extra is None else (extra[0][rows], extra[1][rows]), w_hh, w_hr)
        d_xg.append((start, dx))
        if dh is not dx:
            d_gh.append((start, dh))
        if w_hr is not None:
            d_out.append((start, d_new))
        carry = d_prev if n == carry.shape[0] else ns.cat([d_prev, carry[n:]], 0)
    d_xg = _rows(ns, d_xg)
    d_gh = _rows(ns, d_gh) if d_gh else d_xg
    grads = [d_xg, carry, d_gh.T @ h_prev if needs[2] else None,
             d_gh.sum(0) if b_hh is not None and needs[3] else None]
    if w_hr is not None:
        d_h = _rows(ns, d_out)[:, :w_hr.shape[0]]
        grads.append(d_h.T @ coefficients["h_raw"] if needs[4] else None)
    return [None if grad is None else ns.result(grad) for grad in grads]


def _compiled_prelude(kind, g, ans, init, w_hh, batch_sizes, reverse):
    """What a compiled backward reads, in its form: g and ans contiguous in ans's dtype,
    every row's previous state, and the gradient that the saved columns' own gradient
    sends into the projections (None in a plain backward, where it is zero)."""
    width = init.shape[1]
    g, ans = np.ascontiguousarray(g, ans.dtype), np.ascontiguousarray(ans)
    prev = _previous_states(ans[:, :width], init.astype(ans.dtype, copy=False), batch_sizes,
                            reverse)
    extra = None
    if g[:, width:].any():  # only a caller's own use of the saved columns sends one
        extra = kind.saved_gradients(_Arrays, g[:, width:],
                                     kind.coefficients(_Arrays, prev, ans, w_hh))
    return g, ans, prev, extra


def _previous_states(states, init, batch_sizes, reverse):
    """Every row's previous state, (rows, width), contiguous: a gather by _schedule's
    prev_rows, or, when every step has the whole batch (a padded batch), the states shifted
    by one step with the initial ones at the start (or end, in reverse), copied once."""
    batch = batch_sizes[0]
    if batch_sizes[-1] != batch:
        return np.concatenate([states, init])[_schedule(batch_sizes, reverse)[1]]
    prev = np.empty(states.shape, states.dtype)
    first, rest = (slice(-batch, None), slice(None, -batch)) if reverse else (
        slice(None, batch), slice(batch, None))
    prev[first] = init
    prev[rest] = states[batch:] if reverse else states[:-batch]
    return prev


def _lstm_backward(kind, needs, g, ans, init, w_hh, b_hh, w_hr, batch_sizes, reverse):
    """The LSTM's backward when nothing is recorded. Without a projection, the whole loop
    is one compiled call (lstm_recurrence_backward); with one, per step: the gradient
    reaching the hidden output through the projection, one compiled call for the gates'
    gradient and the cell's carry, and one product for the hidden state's carry, all into
    buffers made once. The weight gradients are then one product each over all steps."""
    g, ans, prev, extra = _compiled_prelude(kind, g, ans, init, w_hh, batch_sizes, reverse)
    work = ans.dtype
    size, hidden = w_hh.shape[0] // 4, w_hh.shape[1]  # the cell's size, h's (maybe projected)
    width = hidden + size
    d_pre = np.empty((ans.shape[0], 4 * size), work)
    carry = np.zeros((batch_sizes[0], width), work)  # as in _backward
    if w_hr is None:  # the whole loop in one compiled call
        lstm_recurrence_backward(g, ans, prev, None if extra is None else extra[0],
                                 w_hh.astype(work, copy=False),
                                 _step_table(batch_sizes, reverse), carry, d_pre)
        return _lstm_gradients(needs, d_pre, carry, prev, hidden, b_hh)
    d_h = np.empty((batch_sizes[0], size), work)
    d_out = np.empty((ans.shape[0], hidden), work)
    with StepProduct(w_hh.astype(work, copy=False), batch_sizes[0]) as hidden_product:
        for start, n in reversed(_schedule(batch_sizes, reverse)[0]):
            rows = slice(start, start + n)
            np.add(g[rows, :hidden], carry[:n, :hidden], out=d_out[rows])
            np.matmul(d_out[rows], w_hr, out=d_h[:n])
            lstm_backward_step(d_h[:n], g[rows], carry[:n], ans[rows], prev[rows],
                               d_pre[rows])
            if extra is not None:
                d_pre[rows] += extra[0][rows]
            hidden_product(d_pre[rows], carry[:n, :hidden])
    h_raw = ans[:, width + 3 * size:] * np.tanh(ans[:, hidden:width])
    return _lstm_gradients(needs, d_pre, carry, prev, hidden, b_hh,
                           d_out.T @ h_raw if needs[4] else None)


def _lstm_gradients(needs, d_pre, carry, prev, hidden, b_hh, *w_hr_grad):
    """The LSTM's input gradients from its gates' pre-activations' gradient d_pre and the
    carry into the initial state: the weights' and bias's are one product over all steps."""
    grads = [d_pre, carry, d_pre.T @ prev[:, :hidden] if needs[2] else None,
             column_sums(d_pre) if b_hh is not None and needs[3] else None, *w_hr_grad]
    return [None if grad is None else Tensor.wrap(grad) for grad in grads]


def _gru_backward(kind, needs, g, ans, init, w_hh, b_hh, w_hr, batch_sizes, reverse):
    """The GRU's backward when nothing is recorded, as the LSTM's: one compiled call per
    step for the projections' gradients, one product for the state's carry."""
    g, ans, h_prev, extra = _compiled_prelude(kind, g, ans, init, w_hh, batch_sizes, reverse)
    work = ans.dtype
    d_xg, d_gh = np.empty((2, ans.shape[0], w_hh.shape[0]), work)
    # The state's gradient from the steps already taken back, in two parts: through the
    # hidden product (carry_mm) and through h' = ... + z h (carry_z).
    carry_mm, carry_z = np.zeros((2,) + init.shape, work)
    with StepProduct(w_hh.astype(work, copy=False), batch_sizes[0]) as hidden_product:
        for start, n in reversed(_schedule(batch_sizes, reverse)[0]):
            rows = slice(start, start + n)
            gru_backward_step(g[rows], carry_mm[:n], carry_z[:n], ans[rows], h_prev[rows],
                              d_xg[rows], d_gh[rows])
            if extra is not None:
                d_xg[rows] += extra[0][rows]
                d_gh[rows] += extra[1][rows]
            hidden_product(d_gh[rows], carry_mm[:n])
    grads = [d_xg, carry_mm + carry_z, d_gh.T @ h_prev if needs[2] else None,
             column_sums(d_gh) if b_hh is not None and needs[3] else None]
    return [None if grad is None else Tensor.wrap(grad) for grad in grads]


def _tangent(kind, tangents, ans, xg, init, w_hh, b_hh, w_hr=None, *, batch_sizes, reverse):
    t_xg, t_init, t_whh, t_bhh, *t_whr = tangents
    steps, _ = _schedule(batch_sizes, reverse)
    h_prev, coefficients = _recompute(_Tensors, kind, ans, init, w_hh, batch_sizes, reverse)
    width = init.shape[1]
    t_xg = Tensor.wrap(np.zeros(xg.shape, ans.dtype)) if t_xg is None else t_xg
    # The parts of each row's tangent that do not go through the previous step's tangent.
    t_gh = 0.0 if t_whh is None else h_prev @ t_whh.T
    if t_bhh is not None:
        t_gh = t_gh + t_bhh
    t_hr = coefficients["h_raw"] @ t_whr[0].T if t_whr and t_whr[0] is not None else None
    carry = t_init if t_init is not None else Tensor.wrap(np.zeros(init.shape, ans.dtype))
    out = []
    for start, n in steps:
        rows = slice(start, start + n)
        t_prev = carry[:n]
        step_gh = t_prev[:, :w_hh.shape[1]] @ w_hh.T
        if not isinstance(t_gh, float):
            step_gh = step_gh + (t_gh[rows] if t_gh.ndim == 2 else t_gh)
        t_new = kind.tangent_step(_Tensors, {name: c[rows] for name, c in coefficients.items()},
                                  t_xg[rows], step_gh, t_prev, w_hr,
                                  None if t_hr is None else t_hr[rows])
        out.append((start, t_new))
        t_state = t_new[:, :width] if kind.saved(w_hh) else t_new
        carry = t_state if n == carry.shape[0] else cat([t_state, carry[n:]], 0)
    return _rows(_Tensors, out)


def _op(name, kind):
    return Op(name, functools.partial(_forward, kind), functools.partial(_backward, kind),
              functools.partial(_tangent, kind), saves="* ans", joint=True)


rnn_tanh = _op("rnn_tanh", _Elman("tanh"))
rnn_relu = _op("rnn_relu", _Elman("relu"))
gru = _op("gru", _GRU())
_LSTM_KIND = _LSTM()
lstm = _op("lstm", _LSTM_KIND)


# ----------------------------------------------------------------------------- a whole LSTM layer
# nn.LSTM's layer without a projection, input projection included, as one op: on oneDNN's LSTM
# primitive where it takes the call (kernels/onednn/rnn.py: float32, a padded batch), which is
# what torch's CPU LSTM runs and about 0.75 of the time of linear followed by `lstm`; else as
# that composition. Its output is each step's h (as `lstm`'s rows) followed by each
# sequence's final c: the primitive keeps its gates and cell states in its workspace, so the
# full rows of `lstm` are not there to return. Its rules are the composition's, recomputed;
# a plain backward after oneDNN's forward is oneDNN's backward.
def _layer_output(ns, rows, batch_sizes, reverse, size):
    """The layer's output from `lstm`'s rows: every step's h, then every final c."""
    return ns.cat([rows[:, :size], rows[final_rows(batch_sizes, reverse), size:2 * size]], 0)


def _rows_gradient(ns, g, batch_sizes, reverse, size):
    """The gradient of `lstm`'s rows from the layer's output gradient g."""
    total = sum(batch_sizes)
    to_c = ns.scatter(g[total:], final_rows(batch_sizes, reverse), (total, size))
    return ns.cat([g[:total], to_c, ns.zeros((total, 4 * size), g)], 1)


def _composed_rows(x, init, w_ih, w_hh, b_ih, b_hh, batch_sizes, reverse):
    """The rows of `lstm` after `linear`, on arrays: the composition the op runs where oneDNN
    does not, and its fused backward reads."""
    return _forward(_LSTM_KIND, linear.forward(x, w_ih, b_ih), init, w_hh, b_hh,
                    batch_sizes=batch_sizes, reverse=reverse)


def _recorded_composition(x, init, w_ih, w_hh, b_ih, b_hh, batch_sizes, reverse):
    """(xg, rows) of the composition as Tensor ops, for the rules that differentiate it."""
    xg = linear(x, w_ih, b_ih)
    return xg, lstm(xg, init, w_hh, b_hh, batch_sizes=batch_sizes, reverse=reverse)


def _six(needs):
    """`needs` of all six inputs: a call without biases passes four."""
    return (*needs, False, False)[:6]


def _layer_forward(x, init, w_ih, w_hh, b_ih=None, b_hh=None, *, batch_sizes, reverse,
                   train=True):
    """`train=False` (no graph will be recorded, as torch's `train` argument of its LSTM):
    oneDNN's inference forward, which keeps no workspace."""
    size = w_hh.shape[1]
    if onednn_rnn.takes([a for a in (x, init, w_ih, w_hh, b_ih, b_hh) if a is not None],
                        batch_sizes):
        steps, batch = len(batch_sizes), batch_sizes[0]
        bias = np.zeros(4 * size, np.float32)
        for b in (b_ih, b_hh):
            if b is not None:
                bias += b
        out = np.empty(((steps + 1) * batch, size), np.float32)
        kept = onednn_rnn.lstm_forward(
            np.ascontiguousarray(x).reshape(steps, batch, -1),
            np.ascontiguousarray(init[:, :size]), np.ascontiguousarray(init[:, size:]),
            np.ascontiguousarray(w_ih), np.ascontiguousarray(w_hh), bias, reverse, out,
            training=train)
        if kept is not None:
            return out, kept
    rows = _composed_rows(x, init, w_ih, w_hh, b_ih, b_hh, batch_sizes, reverse)
    return _layer_output(_Arrays, rows, batch_sizes, reverse, size), rows


def _layer_backward(needs, g, ans, x, init, w_ih, w_hh, b_ih=None, b_hh=None, *, batch_sizes,
                    reverse, train=True, kept):
    """The plain backward (nothing recorded): oneDNN's after oneDNN's training forward
    (`kept` its saved arrays), else the composition's fused backward (`kept` the rows of
    `lstm`, computed here after an inference forward, which keeps nothing)."""
    needs = _six(needs)
    g = np.ascontiguousarray(g, ans.dtype)
    if type(kept) is tuple and kept:
        dx, dh0, dc0, dw_ih, dw_hh, d_bias = onednn_rnn.lstm_backward(kept, ans, g, reverse)
        return [dx.reshape(x.shape), np.concatenate([dh0, dc0], 1), dw_ih, dw_hh,
                d_bias if b_ih is not None else None, d_bias if b_hh is not None else None]
    if type(kept) is tuple:
        kept = _composed_rows(x, init, w_ih, w_hh, b_ih, b_hh, batch_sizes, reverse)
    size = w_hh.shape[1]
    d_xg, d_init, d_whh, d_bhh = (
        None if t is None else t._array for t in
        _backward(_LSTM_KIND, (True, needs[1], needs[3], needs[5]),
                  _rows_gradient(_Arrays, g, batch_sizes, reverse, size), kept, None, init,
                  w_hh, b_hh, batch_sizes=batch_sizes, reverse=reverse))
    dx, dw_ih, db_ih = linear_backward((needs[0], needs[2], needs[4] and b_ih is not None),
                                       d_xg, None, x, w_ih, b_ih)
    return [dx, d_init, dw_ih, d_whh, db_ih, d_bhh]


def _layer_vjp(needs, g, ans, x, init, w_ih, w_hh, b_ih=None, b_hh=None, *, batch_sizes,
               reverse, train=True):
    """The composition's gradients, differentiable: its forward again, then its rules."""
    needs = _six(needs)
    xg, rows = _recorded_composition(x, init, w_ih, w_hh, b_ih, b_hh, batch_sizes, reverse)
    ns = _namespace([g, rows])
    d_xg, d_init, d_whh, d_bhh = _backward(
        _LSTM_KIND, (True, needs[1], needs[3], needs[5]),
        _rows_gradient(ns, g, batch_sizes, reverse, w_hh.shape[1]), rows, xg, init, w_hh,
        b_hh, batch_sizes=batch_sizes, reverse=reverse)
    return [d_xg @ w_ih if needs[0] else None, d_init, d_xg.mT @ x if needs[2] else None,
            d_whh, d_xg.sum(0) if needs[4] and b_ih is not None else None, d_bhh]


def _layer_tangent(tangents, ans, x, init, w_ih, w_hh, b_ih=None, b_hh=None, *, batch_sizes,
                   reverse, train=True):
    t_x, t_init, t_wih, t_whh, t_bih, t_bhh = (*tangents, None, None)[:6]
    xg, rows = _recorded_composition(x, init, w_ih, w_hh, b_ih, b_hh, batch_sizes, reverse)
    t_xg = Tensor.wrap(np.zeros(xg.shape, xg.dtype))
    for part in (None if t_x is None else linear(t_x, w_ih, None),
                 None if t_wih is None else linear(x, t_wih, None), t_bih):
        if part is not None:
            t_xg = t_xg + part
    t_rows = _tangent(_LSTM_KIND, [t_xg, t_init, t_whh, t_bhh], rows, xg, init, w_hh, b_hh,
                      batch_sizes=batch_sizes, reverse=reverse)
    return _layer_output(_Tensors, t_rows, batch_sizes, reverse, w_hh.shape[1])


lstm_layer = Op("lstm_layer", _layer_forward, _layer_vjp, _layer_tangent,
                saves="* ans", joint=True, backward=_layer_backward)


# ----------------------------------------------------------------------------- torch's cells
def _one_step(op, input, hx, w_ih, w_hh, b_ih, b_hh):
    return op(linear(input, w_ih, b_ih), hx, w_hh, b_hh, batch_sizes=(input.shape[0],),
              reverse=False)


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.rnn_tanh_cell: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh), batched (2-D)."""
    return _one_step(rnn_tanh, input, hx, w_ih, w_hh, b_ih, b_hh)


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.rnn_relu_cell: rnn_tanh_cell with relu."""
    return _one_step(rnn_relu, input, hx, w_ih, w_hh, b_ih, b_hh)


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.gru_cell: one GRU step (gates r, z, n), batched (2-D)."""
    return _one_step(gru, input, hx, w_ih, w_hh, b_ih, b_hh)[:, :hx.shape[1]]


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.lstm_cell: one LSTM step (gates i, f, g, o) from hx = (h, c); returns (h', c')."""
    h, c = hx
    out = _one_step(lstm, input, cat([h, c], 1), w_ih, w_hh, b_ih, b_hh)
    size = h.shape[1]
    return out[:, :size], out[:, size:2 * size]
