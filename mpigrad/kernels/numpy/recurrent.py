"""The LSTM's and GRU's per-step gate arithmetic for the numpy backend
(kernels/compiled/recurrent.py). The recurrent ops call these once per time step, so they
take arrays already in the loops' form, prepared once per sequence: C-contiguous rows (a
row slice of a C-contiguous array is one) of one dtype, `compute_dtype`'s, and write into
the views they are given."""
import contextlib

import numpy as np

from ..threads import blas_on_one_thread
from ._compiled import compute_dtype, load_blas, loops

__all__ = ["StepProduct", "compute_dtype", "gru_backward_step", "gru_step",
           "lstm_backward_step", "lstm_recurrence", "lstm_recurrence_backward", "lstm_step"]

# OpenBLAS multiplies matrices of at most 100^3 multiply-adds with kernels that skip packing
# the operands; a recurrence's per-step products of a few rows are above that (20 x 200 by
# 200 x 800 is 3.2e6), and packing w, at every step, costs them more than the product. Wider
# batches gained nothing from any cut (64 rows), so only products of a few rows are cut.
_UNPACKED_SIZE = 100 ** 3
_FEW_ROWS = 32


def _block_shape(w, rows):
    """(width, depth) of the blocks a step's x @ w is cut into, x of at most `rows` rows:
    two column blocks (one per thread, when a loop runs on two), each summed over pieces of
    `depth` rows of w of at most _UNPACKED_SIZE / 2 multiply-adds (the last ones smaller).

    Measured against the column blocks of at most _UNPACKED_SIZE alone that came before (20
    rows, float32, one thread, loaded machine), a step's product forward and backward: 200
    units 0.77-0.83 and 0.69-0.79 of the time (about 68 against 82 us and 86 against 111;
    torch 59 and 68), 400 units 0.72 and 0.62, 650 units 0.35 and 0.29 (1.31 against 3.76 ms
    and 1.33 against 4.57; torch 1.29 and 1.36), 1500 units 0.30 and 0.30. Pieces of up to
    _UNPACKED_SIZE did less well (0.86-0.95 forward at 200 units); one column block a little
    better on one thread, but it leaves a second thread nothing."""
    inner, columns = w.shape
    if rows > _FEW_ROWS or rows * w.size <= _UNPACKED_SIZE:
        return columns, max(inner, 1)
    width = -(-columns // 2)
    pieces = -(-rows * width * inner // (_UNPACKED_SIZE // 2))
    return width, max(-(-inner // pieces), 1)


def _few_rows_on_one_thread(rows):
    """BLAS on one thread for the per-step products of a recurrence of a few rows, which gain
    nothing from more (20 x 200 by 200 x 800: 65-69 us on 1 or 2 threads, and the waking of
    BLAS's second thread on each step made the word LM's recurrences slower on 2 threads
    than on 1)."""
    return blas_on_one_thread() if rows <= _FEW_ROWS else contextlib.nullcontext()


# A transposed view copied by blocks of this many columns took 0.4-0.85x the time of one
# strided copy (W_hh^T of 200, 650 and 1500 units).
_COPY_COLUMNS = 256


def _contiguous(w):
    """w as a C-contiguous array; a transposed view is copied by blocks of its columns."""
    if w.flags.c_contiguous:
        return w
    out = np.empty(w.shape, w.dtype)
    for first in range(0, w.shape[1], _COPY_COLUMNS):
        out[:, first:first + _COPY_COLUMNS] = w[:, first:first + _COPY_COLUMNS]
    return out


class StepProduct:
    """x @ w (into `out`) for every step of a recurrence that steps from Python (the GRU, the
    LSTM with a projection), x of at most `rows` rows, by the blocks of the LSTM's whole loop
    (_block_shape); used as a context, around the steps: a product of a few rows keeps BLAS
    on one thread there (see _few_rows_on_one_thread). w is copied once, contiguous (BLAS
    multiplies by a transposed view about half as fast). x and out: rows of one dtype, each
    contiguous (a column slice of a state is one)."""

    def __init__(self, w, rows):
        self.rows = rows
        self.w = _contiguous(w)
        self.width, self.depth = _block_shape(self.w, rows)
        self._threads = self._product = None

    def __enter__(self):
        load_blas()
        self._product = loops("recurrent").step_product
        self._threads = _few_rows_on_one_thread(self.rows)
        self._threads.__enter__()
        return self

    def __exit__(self, *exception):
        return self._threads.__exit__(*exception)

    def __call__(self, x, out):
        self._product(x, self.w, self.width, self.depth, out)


def lstm_step(xg, gh, bias, prev, out):
    """[h, c, i, f, g, o] of one step into out (n, 6 size), from the gates' pre-activation
    parts xg and gh (n, 4 size), the hidden bias (4 size) and the previous state prev (n, *),
    whose last size columns are the cell."""
    loops("recurrent").lstm_step(xg, gh, bias, prev, out.dtype == np.float64, out)


def lstm_backward_step(d_h, g, carry, ans, prev, d_pre):
    """The gradient of one step's gate pre-activations into d_pre (n, 4 size), from the
    gradient reaching its hidden output d_h (n, size) and its cell (g's and carry's cell
    columns) and its saved row ans; carry's cell columns become the previous cell's
    gradient."""
    loops("recurrent").lstm_backward_step(d_h, g, carry, ans, prev, d_pre.dtype == np.float64,
                                          d_pre)


def gru_step(xg, gh, bias, h_prev, out):
    """[h, r, z, n, hidden_n] of one step into out (n, 5 size), bias (3 size) the hidden
    bias."""
    loops("recurrent").gru_step(xg, gh, bias, h_prev, out.dtype == np.float64, out)


def gru_backward_step(g, carry_mm, carry_z, ans, h_prev, d_xg, d_gh):
    """The gradients of one step's input and hidden projection parts into d_xg and d_gh
    (n, 3 size), from the gradient reaching its state (g's first size columns, carry_mm and
    carry_z summed) and its saved row ans; carry_z becomes d_h z, the part of the previous
    state's gradient that skips the hidden product."""
    loops("recurrent").gru_backward_step(g, carry_mm, carry_z, ans, h_prev, d_xg, d_gh)


def _whole_loop(name, w, rows, *args):
    """The whole-recurrence loop `name` (compiled/recurrent.py) on `args`, then w contiguous
    and the shape of its blocks: scipy's BLAS loaded, and on one thread for a few rows."""
    load_blas()
    with _few_rows_on_one_thread(rows):
        getattr(loops("recurrent"), name)(*args, _contiguous(w), *_block_shape(w, rows))


def lstm_recurrence(xg, h, c, w_hh, bias, steps, out):
    """The LSTM layer (no projection) over all steps in one compiled call: out (rows, 6 size)
    receives each row's [h, c, i, f, g, o]; h and c (batch, size) hold the initial state and
    are left holding the last. xg (rows, 4 size), bias (4 size) and w_hh (4 size, size) in
    the compute dtype, steps (T, 2) int64: each step's first row and row count in running
    order."""
    gh = np.empty((h.shape[0], w_hh.shape[0]), out.dtype)
    _whole_loop("lstm_forward", w_hh.T, h.shape[0], xg, bias, steps, out.dtype == np.float64,
                h, c, out, gh)


def lstm_recurrence_backward(g, ans, prev, extra, w_hh, steps, carry, d_pre):
    """lstm_recurrence's backward: d_pre (rows, 4 size) receives the gradient of the gates'
    pre-activations; carry (batch, 2 size), zeros, ends as the initial [h, c]'s gradient. g
    and ans (rows, 6 size), prev (rows, 2 size) each row's previous state, extra (rows,
    4 size) or None: a gradient added to d_pre. All C-contiguous, in ans's dtype."""
    if extra is None:
        extra = np.empty((0, d_pre.shape[1]), d_pre.dtype)
    _whole_loop("lstm_backward", w_hh, carry.shape[0], g, ans, prev, extra, steps,
                d_pre.dtype == np.float64, carry, d_pre)
