"""The LSTM's and GRU's per-step gate arithmetic for the numpy backend
(kernels/compiled/recurrent.py). The recurrent ops call these once per time step, so they
take arrays already in the loops' form, prepared once per sequence: C-contiguous rows (a
row slice of a C-contiguous array is one) of one dtype, `compute_dtype`'s, and write into
the views they are given."""
import numpy as np

from ..threads import Settings
from ._compiled import compute_dtype, loops

__all__ = ["StepProduct", "compute_dtype", "gru_backward_step", "gru_step",
           "lstm_backward_step", "lstm_step"]

# OpenBLAS multiplies matrices of at most 100^3 multiply-adds with kernels that skip packing
# the operands; per-step products of a few rows are just above that (20 x 200 by 200 x 800 is
# 3.2e6), and cut into column blocks under it each took about 20% less in all: 65 against
# 82 us forward, 69 against 86 us backward (20 x 800 by 800 x 200 in four blocks). Wider
# batches gained nothing (64 rows, any cut), so only products of a few rows are cut.
_UNPACKED_SIZE = 100 ** 3
_FEW_ROWS = 32


class StepProduct:
    """x @ w (into `out`) for every step of a recurrence, x of at most `rows` rows. w is
    copied once, contiguous (BLAS multiplies by a transposed view about half as fast), and
    cut into column blocks each small enough for BLAS's unpacked kernels when one thread
    computes (threaded, BLAS splits the whole product between its threads instead)."""

    def __init__(self, w, rows):
        blocks = 1
        if rows <= _FEW_ROWS and Settings.intra_op == 1:
            blocks = min(w.shape[1], -(-rows * w.size // _UNPACKED_SIZE))
        edges = np.linspace(0, w.shape[1], blocks + 1).astype(int)
        self.blocks = [(slice(lo, hi), np.ascontiguousarray(w[:, lo:hi]))
                       for lo, hi in zip(edges[:-1], edges[1:])]

    def __call__(self, x, out):
        for columns, block in self.blocks:
            np.matmul(x, block, out=out[:, columns])


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
