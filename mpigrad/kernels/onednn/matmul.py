"""linear's forward, x W^T + b, on oneDNN's matmul primitive ("brg:avx512_core" here):
0.8 of OpenBLAS's time with its bias epilogue on the GPT's and the MLP's layers, 0.96 on the
word LM's, about torch's MKL (docs/benchmarks.md). The weight is read in place as the
transposed (K, N) view of its (N, K) array; asked to pick its own layout, oneDNN reorders the
weight on every call, which costs more than it saves on the MLP's 1024 x 1024 layers.
"""
import ctypes

import numpy as np

from ..threads import product_thread_count
from . import ARG_BIAS, ARG_DST, ARG_SRC, ARG_WEIGHTS, Pointer, library
from ._primitive import PlainCall, cached


def _build(dnnl, rows, inner, columns, has_bias):
    descs = {ARG_SRC: dnnl.strided_desc((rows, inner), (inner, 1)),
             ARG_WEIGHTS: dnnl.strided_desc((inner, columns), (1, inner)),
             ARG_DST: dnnl.strided_desc((rows, columns), (columns, 1))}
    if has_bias:
        descs[ARG_BIAS] = dnnl.strided_desc((1, columns), (columns, 1))
    primitive_desc = Pointer()
    try:
        dnnl.call("dnnl_matmul_primitive_desc_create", ctypes.byref(primitive_desc),
                  dnnl.engine, descs[ARG_SRC], descs[ARG_WEIGHTS], descs.get(ARG_BIAS),
                  descs[ARG_DST], None)
        return PlainCall(dnnl, primitive_desc, descs, {ARG_DST})
    finally:
        if primitive_desc:
            dnnl.lib.dnnl_primitive_desc_destroy(primitive_desc)
        for desc in descs.values():
            dnnl.lib.dnnl_memory_desc_destroy(desc)


def linear(x, weight, bias):
    """x (M, K) weight (N, K)^T + bias (N, or None): C-contiguous float32 arrays. None where
    oneDNN has no implementation for it."""
    dnnl = library()
    (rows, inner), columns = x.shape, weight.shape[0]
    threads = dnnl.threads(product_thread_count(rows, inner, columns))
    has_bias = bias is not None
    call = cached(("linear", rows, inner, columns, has_bias, threads),
                  lambda: _build(dnnl, rows, inner, columns, has_bias))
    if call is None:
        return None
    out = np.empty((rows, columns), np.float32)
    arrays = {ARG_SRC: x, ARG_WEIGHTS: weight, ARG_DST: out}
    if has_bias:
        arrays[ARG_BIAS] = bias
    call(arrays)
    return out
