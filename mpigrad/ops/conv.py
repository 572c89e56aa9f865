"""Sliding windows: im2col (`unfold`) and its adjoint col2im (`fold`).

Each is the other's vector-Jacobian product and, being linear, its own tangent rule; so
convolution and pooling built from them (with matmul, max, mean) are differentiable to any
order in both modes. Sizes are (height, width) pairs.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .core import Op


def sliding_output_size(size, kernel_size, dilation, padding, stride):
    """Output positions along each spatial axis; positive when the kernel fits."""
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                 for n, k, d, p, s in zip(size, kernel_size, dilation, padding, stride))


def _unfold(x, kernel_size, dilation, padding, stride):
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    n, c = x.shape[:2]
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    # Windows span the dilated kernel; striding the window axes by the dilation keeps the taps.
    windows = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]
    oh, ow = windows.shape[2:4]
    return windows.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, oh * ow)


def _fold(cols, output_size, kernel_size, dilation, padding, stride):
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    h, w = output_size
    n = cols.shape[0]
    c = cols.shape[1] // (kh * kw)
    oh, ow = sliding_output_size((h, w), kernel_size, dilation, padding, stride)
    cols = cols.reshape(n, c, kh, kw, oh, ow)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), cols.dtype)
    # One vectorised strided add per kernel tap; overlapping windows accumulate.
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            columns = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            out[:, :, rows, columns] += cols[:, :, i, j]
    if ph or pw:
        out = np.ascontiguousarray(out[:, :, ph:ph + h, pw:pw + w])
    return out


unfold = Op("unfold", _unfold,
            (lambda g, ans, x, kernel_size, dilation, padding, stride:
             fold(g, output_size=x.shape[2:], kernel_size=kernel_size, dilation=dilation,
                  padding=padding, stride=stride),),
            (lambda t, ans, x, kernel_size, dilation, padding, stride:
             unfold(t, kernel_size=kernel_size, dilation=dilation, padding=padding,
                    stride=stride),))

fold = Op("fold", _fold,
          (lambda g, ans, cols, output_size, kernel_size, dilation, padding, stride:
           unfold(g, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride),),
          (lambda t, ans, cols, output_size, kernel_size, dilation, padding, stride:
           fold(t, output_size=output_size, kernel_size=kernel_size, dilation=dilation,
                padding=padding, stride=stride),))
