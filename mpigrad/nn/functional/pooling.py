"""Pooling: max and average over sliding windows, and over torch's adaptive bins."""
import numbers

import numpy as np

from ... import ops
from ...ops import conv as conv_ops
from ...ops.conv import kernel_extent, sliding_output_size
from ...tensor import Tensor
from .. import _checks
from .conv import _batched_image


def _pool_geometry(what, size, kernel_size, stride, padding, dilation, ceil_mode):
    """Output size, and extra bottom/right padding that ceil_mode needs, for a pooling window."""
    _checks.pool_padding(what, padding, kernel_size)
    extent = kernel_extent(kernel_size, dilation)
    _checks.kernel_fits(what, extent, size, padding)
    out = list(sliding_output_size(size, kernel_size, dilation, padding, stride))
    extra = [0, 0]
    if ceil_mode:
        for i in range(2):
            span = size[i] + 2 * padding[i] - extent[i]
            n = -(-span // stride[i]) + 1
            # torch drops a last window that would start entirely in the end padding.
            if (n - 1) * stride[i] >= size[i] + padding[i]:
                n -= 1
            extra[i] = (n - 1) * stride[i] + extent[i] - (size[i] + 2 * padding[i])
            out[i] = n
    return tuple(out), tuple(extra)


def _pool_columns(x, kernel_size, stride, padding, extra):
    """Every pooling window of every channel: (N * C, kh * kw, L), zero-padded."""
    n, c, h, w = x.shape
    planes = x.reshape(n * c, 1, h, w)
    (ph, pw), (eh, ew) = padding, extra
    if ph or pw or eh or ew:
        planes = ops.pad(planes, (pw, pw + ew, ph, ph + eh))
    return conv_ops.unfold(planes, kernel_size=kernel_size, dilation=(1, 1), padding=(0, 0),
                           stride=stride)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Maximum over each window; padding counts as -inf. With return_indices, also each
    maximum's flat position in its (H, W) input plane, as torch returns."""
    x, unbatched = _batched_image(input, "max_pool2d")
    kernel_size = _checks.pair("kernel_size", kernel_size, 1)
    stride = kernel_size if stride is None else _checks.pair("stride", stride, 1)
    padding, dilation = _checks.pair("padding", padding, 0), _checks.pair("dilation", dilation, 1)
    n, c, h, w = x.shape
    _, extra = _pool_geometry("max_pool2d", (h, w), kernel_size, stride, padding, dilation,
                              ceil_mode)
    geometry = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
                    extra=extra)
    out = ops.named(conv_ops.max_pool2d(x, **geometry), "MaxPool2DWithIndicesBackward0", x)
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    # One winner per window (the first maximum), as torch returns.
    taps = conv_ops.winning_taps(x._array, **geometry)
    tap_row, tap_col = np.divmod(taps.astype(np.int64), kernel_size[1])
    oh, ow = out.shape[2:]
    rows = np.arange(oh)[:, None] * stride[0] - padding[0] + tap_row * dilation[0]
    columns = np.arange(ow)[None, :] * stride[1] - padding[1] + tap_col * dilation[1]
    indices = Tensor.wrap(rows * w + columns)
    if unbatched:
        return out.squeeze(0), indices.squeeze(0)
    return out, indices


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Mean over each window. Zero padding counts in the divisor if count_include_pad; a
    window that ceil_mode lets run past the padding is divided by its in-bounds part only."""
    x, unbatched = _batched_image(input, "avg_pool2d")
    kernel_size = _checks.pair("kernel_size", kernel_size, 1)
    stride = kernel_size if stride is None else _checks.pair("stride", stride, 1)
    padding = _checks.pair("padding", padding, 0)
    _checks.divisor_override("avg_pool2d", divisor_override)
    n, c, h, w = x.shape
    (oh, ow), extra = _pool_geometry("avg_pool2d", (h, w), kernel_size, stride, padding,
                                     (1, 1), ceil_mode)
    sums = _pool_columns(x, kernel_size, stride, padding, extra).sum(1)
    if divisor_override is not None:
        divisor = float(divisor_override)
    else:
        # Count each window's cells that the divisor includes, by pooling an indicator.
        (ph, pw), (eh, ew) = padding, extra
        counted = np.zeros((1, 1, h + 2 * ph + eh, w + 2 * pw + ew), x.dtype)
        if count_include_pad:
            counted[..., :h + 2 * ph, :w + 2 * pw] = 1
        else:
            counted[..., ph:ph + h, pw:pw + w] = 1
        divisor = conv_ops.unfold(Tensor.wrap(counted), kernel_size=kernel_size,
                                  dilation=(1, 1), padding=(0, 0), stride=stride)._array.sum(1)
    out = ops.named((sums / divisor).reshape(n, c, oh, ow), "AvgPool2DBackward0", x)
    return out.squeeze(0) if unbatched else out


def _pool1d_as_2d(input, what):
    """(N, C, L) or (C, L) as a height-1 image, for the 2-D pooling."""
    if input.ndim in (2, 3):
        return input.unsqueeze(-2)
    if what == "max_pool1d":
        raise RuntimeError(f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 "
                           f"dim batch size for input, but got:{list(input.shape)}")
    raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor "
                       f"for argument #1 'self' (while checking arguments for {what})")


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Maximum over each window of the last dimension (max_pool2d on a height-1 image);
    indices are positions along that dimension."""
    kernel_size = _checks.single("kernel_size", kernel_size, 1)
    stride = kernel_size if stride is None else _checks.single("stride", stride, 1)
    out = max_pool2d(_pool1d_as_2d(input, "max_pool1d"), (1,) + kernel_size, (1,) + stride,
                     (0,) + _checks.single("padding", padding, 0),
                     (1,) + _checks.single("dilation", dilation, 1), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """Mean over each window of the last dimension (avg_pool2d on a height-1 image)."""
    kernel_size = _checks.single("kernel_size", kernel_size, 1)
    stride = kernel_size if stride is None else _checks.single("stride", stride, 1)
    return avg_pool2d(_pool1d_as_2d(input, "avg_pool1d"), (1,) + kernel_size, (1,) + stride,
                      (0,) + _checks.single("padding", padding, 0), ceil_mode,
                      count_include_pad).squeeze(-2)


def _adaptive_bins(size, out_size):
    """torch's adaptive bins along one axis: bin i is [floor(i * size / out_size),
    ceil((i + 1) * size / out_size))."""
    return [((i * size) // out_size, -((-(i + 1) * size) // out_size)) for i in range(out_size)]


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Maximum over torch's adaptive bins of the last two dimensions. Each bin's winner (its
    first maximum) is found on the values, then gathered, so the gradient goes to the winners
    as torch's does; with return_indices also their flat positions in each (H, W) plane."""
    if input.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: "
                           f"{list(input.shape)}")
    height, width = _adaptive_sizes("adaptive_max_pool2d", input, output_size, 2)
    h, w = input.shape[-2:]
    planes = input._array
    winners = np.empty(planes.shape[:-2] + (height, width), np.int64)
    for i, (top, bottom) in enumerate(_adaptive_bins(h, height)):
        for j, (left, right) in enumerate(_adaptive_bins(w, width)):
            block = planes[..., top:bottom, left:right].reshape(planes.shape[:-2] + (-1,))
            row, column = np.divmod(block.argmax(-1), right - left)
            winners[..., i, j] = (top + row) * w + left + column
    indices = Tensor.wrap(winners)
    flat = input.reshape(*input.shape[:-2], h * w)
    out = flat.gather(-1, indices.reshape(*winners.shape[:-2], -1)).reshape(winners.shape)
    return (out, indices) if return_indices else out


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Maximum over torch's adaptive bins of the last dimension."""
    x = _pool1d_as_2d(input, "adaptive_max_pool1d")
    (length,) = _adaptive_sizes("adaptive_max_pool1d", input, output_size, 1)
    out = adaptive_max_pool2d(x, (1, length), return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def _adaptive_mean_matrix(size, out_size, dtype):
    """(out_size, size) matrix whose row i averages torch's adaptive bin i: inputs
    floor(i * size / out_size) up to ceil((i + 1) * size / out_size)."""
    matrix = np.zeros((out_size, size), dtype=dtype)
    for i in range(out_size):
        start, end = (i * size) // out_size, -((-(i + 1) * size) // out_size)
        matrix[i, start:end] = 1.0 / (end - start)
    return Tensor(matrix)


def _adaptive_sizes(what, input, output_size, dims):
    if input.ndim < dims + 1:
        raise RuntimeError(f"{what}(): Expected {dims + 1}D or {dims + 2}D tensor, but got "
                           f"{list(input.shape)}")
    sizes = (output_size,) * dims if isinstance(output_size, numbers.Integral) or \
        output_size is None else tuple(output_size)
    if len(sizes) != dims:
        raise RuntimeError(f"{what}: output_size must be {dims}")
    return [input.shape[input.ndim - dims + i] if s is None else int(s)
            for i, s in enumerate(sizes)]


def adaptive_avg_pool1d(input, output_size):
    """Mean over torch's adaptive bins of the last dimension, as one product with a fixed
    averaging matrix (so its gradient and tangent are products too)."""
    (length,) = _adaptive_sizes("adaptive_avg_pool1d", input, output_size, 1)
    return input @ _adaptive_mean_matrix(input.shape[-1], length, input.dtype).T


def adaptive_avg_pool2d(input, output_size):
    """Mean over torch's adaptive bins of the last two dimensions: bins are products of a
    height interval and a width interval, so the mean separates into one averaging matrix per
    axis."""
    height, width = _adaptive_sizes("adaptive_avg_pool2d", input, output_size, 2)
    if (height, width) == (1, 1):  # global pooling (ResNet's head) is a mean, as in torch
        return input.mean((-2, -1), keepdim=True)
    rows = _adaptive_mean_matrix(input.shape[-2], height, input.dtype)
    columns = _adaptive_mean_matrix(input.shape[-1], width, input.dtype)
    return rows @ input @ columns.T
