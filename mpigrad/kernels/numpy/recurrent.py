"""The LSTM and GRU steps' gate arithmetic for the numpy backend
(kernels/compiled/recurrent.py)."""
import numpy as np

from ._compiled import compute_dtype, loops


def _step(loop, xg, gh, state, width):
    dtype = np.result_type(xg, gh, state)
    work = compute_dtype(dtype)
    out = np.empty((xg.shape[0], width), work)
    loop(np.asarray(xg, work), np.asarray(gh, work), np.asarray(state, work),
         work == np.float64, out)
    return out if out.dtype == dtype else out.astype(dtype)


def lstm_step(xg, gh, c_prev):
    """[h, c, i, f, g, o] of one step, (n, 6 size), in the inputs' dtype."""
    return _step(loops("recurrent").lstm_step, xg, gh, c_prev, 6 * c_prev.shape[1])


def gru_step(xg, gh, h_prev):
    """[h, r, z, n, hidden_n] of one step, (n, 5 size), in the inputs' dtype."""
    return _step(loops("recurrent").gru_step, xg, gh, h_prev, 5 * h_prev.shape[1])
