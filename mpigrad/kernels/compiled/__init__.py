"""Compiled loops (numba) behind the numpy backend's fused kernels.

These modules import numba at their top, so nothing here is imported when mpigrad is:
`kernels/numpy/_compiled.py` imports a module of loops on the first call of a kernel that
needs it, and numba compiles each loop on its first call (or loads it from its on-disk
cache, `cache=True`). See `_math.py` for how every loop is built.

On a CPU with AVX-512, LLVM's tuning for Intel's server cores (skylake-avx512, cascadelake,
icelake-server) prefers 256-bit vectors, for the clock those cores lose on 512-bit
instructions. The steps mpigrad runs already spend most of their time in BLAS's 512-bit
kernels (and torch's vectorised ops use 512 bits too), so the loops here ask for the full
width: whole training steps, 256 against 512 bits alternated process by process (one
thread, 2026-11-28): GPT 112 -> 103 ms, word LM 66 -> 62 ms, ResNet, CNN and MLP unchanged.
numba's own NUMBA_CPU_NAME or NUMBA_CPU_FEATURES, when either is set, decide instead (a
cache shared by different machines wants NUMBA_CPU_NAME=generic, say).
"""
import numba
from llvmlite import binding


def _full_vector_width():
    if numba.config.CPU_NAME is not None or numba.config.CPU_FEATURES is not None:
        return
    features = binding.get_host_cpu_features()
    if features.get("avx512f"):
        # Before numba's code generator exists: it reads the features once, when it is made.
        numba.config.CPU_FEATURES = features.flatten() + ",-prefer-256-bit"


_full_vector_width()
