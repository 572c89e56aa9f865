"""ReLU's and LeakyReLU's loops, forward and backward, one pass each over flat arrays.

`x`, `g`, `ans` and `out` are contiguous 1-d arrays of one length and one float dtype, split
among threads by element (see _threads.py).
"""
from numba import prange

from ._threads import parallel

# Elements per thread (two threads from 524288), measured when threads ran on numba's
# workqueue, whose regions cost tens of microseconds: forward and backward over 65536 float32
# elements took 18 us on one thread, 123 us on two; over 524288, 122 against 272 us (loaded
# machine). On tbb (2 us a region) a smaller grain may pay; these passes are memory-bound, and
# quartering every grain showed nothing beyond noise in bench_models at 2 threads.
_GRAIN = 1 << 18


@parallel(_GRAIN, rows=("x", "out"))
def relu(x, out):
    """torch's relu: 0 below zero, x elsewhere, so nan stays nan and -0.0 stays -0.0 (numpy's
    maximum(x, 0) gave +0.0, and took 2.5x this loop's time)."""
    for i in prange(out.size):
        value = x[i]
        if value < 0:
            value = 0
        out[i] = value


@parallel(_GRAIN, rows=("g", "ans", "out"))
def relu_backward(g, ans, out):
    """torch's threshold_backward at 0: g where the output is above 0, zero where it is at or
    below (a nan output passes g, as torch's `ans <= 0 ? 0 : g`). A select, not g * (ans >
    0): an infinite or nan g at a zero output gives 0, as in torch, not nan."""
    for i in prange(out.size):
        value = g[i]
        if ans[i] <= 0:
            value = 0
        out[i] = value


@parallel(_GRAIN, rows=("x", "out"))
def leaky_relu(x, negative_slope, out):
    """torch's leaky_relu: x above 0, x negative_slope elsewhere (nan stays nan)."""
    for i in prange(out.size):
        value = x[i]
        out[i] = value if value > 0 else value * negative_slope


@parallel(_GRAIN, rows=("g", "reference", "out"))
def leaky_relu_backward(g, reference, negative_slope, out):
    """g where `reference` (the input, or the output of a slope >= 0, which is positive
    exactly where the input is) is above 0, g negative_slope elsewhere."""
    for i in prange(out.size):
        value = g[i]
        out[i] = value if reference[i] > 0 else value * negative_slope
