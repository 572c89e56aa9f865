"""numpy's OpenBLAS told to put its idle threads to sleep soon, at import, before numpy loads.

After each threaded product OpenBLAS keeps its worker threads spinning for the next one, for
2**28 cycles (about a tenth of a second) by default. A training step runs products between
its other kernels, so those workers spin through the compiled loops' threaded regions (numba's
tbb threads) and hold the cores these want. `bench_models.py --threads 2` on 2 cores, quiet,
two runs each (ratio to torch): the GPT step 1.21x and 1.22x with OpenBLAS's default wait,
1.13x and 1.13x with 2**12 cycles (about 2 us); the MLP, all products, 0.99x-1.04x either
way. The word LM's per-step products (20 x 200 by 200 x 800, back to back) lose a little:
1.46x and 1.52x against 1.53x and 1.53x, a sleeping worker's wake-up on each.

OpenBLAS reads `OPENBLAS_THREAD_TIMEOUT` (log2 of the cycles, 4 to 30) once, when it loads,
so mpigrad sets it only when it is imported before numpy; imported after numpy, it cannot,
and `state` says so. A value the user set wins (30 keeps OpenBLAS's longest wait). Other
BLAS libraries ignore the variable.
"""
import os
import sys

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
WAIT_CYCLES_LOG2 = 12

# What tune() did, for tests and for a curious user: "set", "user's", "numpy first".
state = None


def tune():
    global state
    if os.environ.get(VARIABLE, "").strip():
        state = "user's"
    elif "numpy" in sys.modules:
        state = "numpy first"
    else:
        os.environ[VARIABLE] = str(WAIT_CYCLES_LOG2)
        state = "set"


tune()
