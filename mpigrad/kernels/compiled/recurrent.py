"""One LSTM step's gate arithmetic in one pass: from the pre-activations' two halves to the
new cell, hidden state and gates, instead of a numpy pass (and a temporary) per operation.
The batch's rows are split among threads (see _threads.py)."""
import math

from numba import prange

from ._math import exp, jit
from ._threads import parallel


@jit
def _sigmoid(v):
    return 1.0 / (1.0 + exp(-v))


@parallel()
def lstm_step(xg, gh, c_prev, exact_tanh, out):
    """xg, gh (n, 4 size) in torch's gate order i, f, g, o; c_prev (n, size); out (n, 6 size)
    receives [h, c, i, f, g, o]. Computed in float64; tanh is math.tanh for float64 results
    (exact to an ulp; a scalar call) and 1 - 2 / (e^2u + 1) for float32 ones (vectorisable,
    within 1e-16 of tanh, far below float32's rounding)."""
    size = c_prev.shape[1]
    for r in prange(xg.shape[0]):
        for k in range(size):
            i = _sigmoid(float(xg[r, k]) + float(gh[r, k]))
            f = _sigmoid(float(xg[r, size + k]) + float(gh[r, size + k]))
            u = float(xg[r, 2 * size + k]) + float(gh[r, 2 * size + k])
            g = math.tanh(u) if exact_tanh else 1.0 - 2.0 / (exp(2.0 * u) + 1.0)
            o = _sigmoid(float(xg[r, 3 * size + k]) + float(gh[r, 3 * size + k]))
            c = f * float(c_prev[r, k]) + i * g
            tc = math.tanh(c) if exact_tanh else 1.0 - 2.0 / (exp(2.0 * c) + 1.0)
            out[r, k] = o * tc
            out[r, size + k] = c
            out[r, 2 * size + k] = i
            out[r, 3 * size + k] = f
            out[r, 4 * size + k] = g
            out[r, 5 * size + k] = o


@parallel()
def gru_step(xg, gh, h_prev, exact_tanh, out):
    """xg, gh (n, 3 size) in torch's gate order r, z, n; h_prev (n, size); out (n, 5 size)
    receives [h, r, z, n, hidden_n] with n = tanh(xg_n + r hidden_n), hidden_n = gh_n,
    h = n + z (h_prev - n). tanh as in lstm_step."""
    size = h_prev.shape[1]
    for r in prange(xg.shape[0]):
        for k in range(size):
            reset = _sigmoid(float(xg[r, k]) + float(gh[r, k]))
            update = _sigmoid(float(xg[r, size + k]) + float(gh[r, size + k]))
            hidden_n = float(gh[r, 2 * size + k])
            u = float(xg[r, 2 * size + k]) + reset * hidden_n
            n = math.tanh(u) if exact_tanh else 1.0 - 2.0 / (exp(2.0 * u) + 1.0)
            out[r, k] = n + update * (float(h_prev[r, k]) - n)
            out[r, size + k] = reset
            out[r, 2 * size + k] = update
            out[r, 3 * size + k] = n
            out[r, 4 * size + k] = hidden_n
