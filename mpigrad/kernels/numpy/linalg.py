"""linear for the numpy backend: the forward's product and bias in one pass over the output
(addmm), and the fused backward's three gradients from one folding of the batch dimensions,
as torch's addmm backward does.

numpy's matmul runs a (B, T, K) @ (K, N) product as B GEMMs of T rows; folded into one
(B T, K) matrix the same product is a single GEMM, which BLAS runs faster (GPT's layers on
(16, 64, 128) inputs: 1.9 -> 1.4 ms a product, float32, one thread).
"""
import math

import numpy as np

from .. import onednn
from ..onednn import matmul as onednn_matmul
from ..threads import matmul, product_threads
from ._compiled import COMPILED_FROM, load_blas, loops

# Where oneDNN is loaded, linear's float32 products from this many multiply-adds run on it:
# the forward on its matmul primitive (onednn/matmul.py), the gradients on its sgemm, which
# ran them in 0.8-0.9 of OpenBLAS's time on the GPT's, the MLP's and the word LM's layers (its
# matmul primitive did no better there); below 1M a call's fixed cost loses
# (docs/benchmarks.md).
_ONEDNN_PRODUCT_FROM = 1 << 20


def as_matrix(x):
    """x (..., K) as a (rows, K) matrix (an array or a Tensor): a view when its batch
    dimensions fold."""
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def column_sums(rows):
    """rows (M, N) summed over its rows, as a product with ones: BLAS's GEMV takes 0.3-0.5 of
    numpy's row-by-row reduction (a GPT layer's (1024, 384) bias gradient: 24 us against 55).
    It adds the rows in blocks, so the last bits differ from numpy's sum (neither is torch's
    order); they are the same from run to run and at any address."""
    return np.matmul(np.ones(rows.shape[0], rows.dtype), rows)


def addmm(x, weight, bias):
    """x (M, K) weight^T + bias, the bias copied into the output first and the product added
    onto it in one GEMM (compiled/linalg.py), for float32 and float64, a bias of one value per
    output feature and an output of COMPILED_FROM elements or more; otherwise numpy's product,
    then the bias added. A 1-d x is one row."""
    if x.ndim == 1:
        return addmm(x.reshape(1, -1), weight, bias).reshape(-1)
    if (x.dtype not in (np.float32, np.float64) or bias.shape != weight.shape[:1]
            or x.shape[0] * weight.shape[0] < COMPILED_FROM):
        out = matmul(x, weight.T)
        np.add(out, bias, out=out)
        return out
    load_blas()
    out = np.empty((x.shape[0], weight.shape[0]), x.dtype)
    with product_threads(x.shape[0], x.shape[1], weight.shape[0]):
        loops("linalg").addmm(np.ascontiguousarray(x), np.ascontiguousarray(weight),
                              np.ascontiguousarray(bias), out)
    return out


def linear_on_onednn(x, weight, bias):
    """x (M, K) weight^T + bias on oneDNN's matmul primitive, for float32 arrays of
    _ONEDNN_PRODUCT_FROM multiply-adds or more and a bias of one value per output feature;
    None where oneDNN does not take it."""
    if (x.ndim != 2 or x.shape[0] * x.shape[1] * weight.shape[0] < _ONEDNN_PRODUCT_FROM
            or x.dtype != np.float32 or weight.dtype != np.float32
            or (bias is not None and (bias.dtype != np.float32
                                      or bias.shape != weight.shape[:1]))
            or onednn.library() is None):
        return None
    return onednn_matmul.linear(np.ascontiguousarray(x), np.ascontiguousarray(weight),
                                None if bias is None else np.ascontiguousarray(bias))


def matrix_product(a, b):
    """a @ b of matrices: oneDNN's sgemm (see _ONEDNN_PRODUCT_FROM), else threads.matmul
    (small products on one BLAS thread)."""
    if a.shape[0] * a.shape[1] * b.shape[1] >= _ONEDNN_PRODUCT_FROM and onednn.gemm_takes(a, b):
        dnnl = onednn.library()
        if dnnl is not None:
            out = np.empty((a.shape[0], b.shape[1]), np.float32)
            dnnl.gemm(a, b, out)
            return out
    return matmul(a, b)


def product(a, b):
    """The matmul op's forward, np.matmul's result: matrices through matrix_product, and a
    C-contiguous stack of matrices times one matrix folded into one product first (torch
    folds it too; numpy would run a GEMM per matrix). On oneDNN a float32 product's threads
    are the OpenMP team the compiled loops run on, where OpenBLAS's would be a second pool:
    two teams spinning after their work take the cores from each other (a float32 step of
    two 1024-wide products with GELU and LayerNorm between them, on 2 threads: 60 ms with
    the products on OpenBLAS, 44-49 ms on oneDNN). Other stacks: numpy's matmul."""
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        return matrix_product(as_matrix(a), b).reshape(a.shape[:-1] + b.shape[1:])
    if a.ndim == 2 and b.ndim == 2:
        return matrix_product(a, b)
    return np.matmul(a, b)


def linear_backward(needs, g, ans, x, weight, bias):
    rows = as_matrix(g)
    grad_x = matrix_product(rows, weight).reshape(x.shape) if needs[0] else None
    grad_weight = matrix_product(rows.T, as_matrix(x)) if needs[1] else None
    grad_bias = column_sums(rows) if needs[2] else None
    return grad_x, grad_weight, grad_bias
