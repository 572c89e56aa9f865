"""Compiled loops (numba) behind the numpy backend's fused kernels.

These modules import numba at their top, so nothing here is imported when mpigrad is:
`kernels/numpy/_compiled.py` imports a module of loops on the first call of a kernel that
needs it, and numba compiles each loop on its first call (or loads it from its on-disk
cache, `cache=True`). See `_math.py` for how every loop is built.
"""
