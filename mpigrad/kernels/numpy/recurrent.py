"""The LSTM step's gate arithmetic for the numpy backend (kernels/compiled/recurrent.py)."""
import numpy as np

from ._compiled import compute_dtype, loops


def lstm_step(xg, gh, c_prev):
    """[h, c, i, f, g, o] of one step, (n, 6 size), in the inputs' dtype."""
    dtype = np.result_type(xg, gh, c_prev)
    work = compute_dtype(dtype)
    out = np.empty((xg.shape[0], 3 * gh.shape[1] // 2), work)
    loops("recurrent").lstm_step(np.asarray(xg, work), np.asarray(gh, work),
                                 np.asarray(c_prev, work), work == np.float64, out)
    return out if out.dtype == dtype else out.astype(dtype)
