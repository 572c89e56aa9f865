"""torch.nn.functional's names and semantics, composed from mpigrad's differentiable ops.

Everything here is built from op rules that are themselves differentiable, so second
derivatives (double backward) work without extra rules. Conventions follow torch: images
are (N, C, H, W) (or unbatched (C, H, W)), class scores (N, C, d1, ...) with the class
dimension second.
"""
import numbers
import warnings

import numpy as np

from .. import ops, random
from ..autograd import grad_mode
from ..dtypes import check_same_dtype
from ..ops import conv as conv_ops
from ..ops.conv import kernel_extent, sliding_output_size
from ..ops.shape import pad  # noqa: F401  (torch.nn.functional.pad)
from ..tensor import Tensor

__all__ = ["linear", "conv2d", "unfold", "fold", "max_pool2d", "avg_pool2d", "pad",
           "relu", "leaky_relu", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax",
           "dropout", "dropout1d", "dropout2d", "layer_norm", "batch_norm", "embedding", "one_hot",
           "cross_entropy", "nll_loss", "mse_loss", "conv1d", "pixel_shuffle", "pixel_unshuffle",
           "group_norm", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "conv_transpose1d",
           "conv_transpose2d", "max_pool1d", "avg_pool1d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "instance_norm", "interpolate"]


# ----------------------------------------------------------------------------- argument checks
def _ntuple(value, name, minimum, length):
    """An int or a `length`-tuple of ints, each at least `minimum`, as a tuple."""
    values = (value,) * length if isinstance(value, numbers.Integral) else tuple(value)
    if len(values) != length or not all(isinstance(v, numbers.Integral) for v in values):
        noun = "a pair of ints" if length == 2 else f"a {length}-tuple of ints"
        raise TypeError(f"{name} must be an int or {noun}, got {value!r}")
    if any(v < minimum for v in values):
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return tuple(int(v) for v in values)


def _pair(value, name, minimum):
    """An int or a pair of ints, each at least `minimum`, as a (height, width) tuple."""
    return _ntuple(value, name, minimum, 2)


def _single(value, name, minimum):
    return _ntuple(value, name, minimum, 1)


def _as_tensor(x):
    return x if isinstance(x, Tensor) else Tensor(x)


def _batched_image(input, what):
    """`input` as (N, C, H, W), and whether it came in unbatched as (C, H, W)."""
    if input.ndim == 4:
        return input, False
    if input.ndim == 3:
        return input.unsqueeze(0), True
    raise ValueError(f"{what}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape "
                     f"{tuple(input.shape)}")


def _check_fits(what, extent, padded):
    if any(e > p for e, p in zip(extent, padded)):
        raise ValueError(f"{what}: the (dilated) kernel of size {extent} is larger than the "
                         f"padded input of size {padded}")


# ----------------------------------------------------------------------------- linear and conv
def linear(input, weight, bias=None):
    """y = x W^T + b with W of shape (out_features, in_features), as one fused node."""
    if input.shape[-1:] != weight.shape[1:]:
        raise ValueError(f"linear: expected input with last dimension {weight.shape[1]}, got "
                         f"shape {tuple(input.shape)}")
    return ops.linear(input, weight, bias)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: every sliding block of `input` (N, C, H, W) as a column, giving
    (N, C * kh * kw, L) with L the number of block positions."""
    kernel_size, dilation = _pair(kernel_size, "kernel_size", 1), _pair(dilation, "dilation", 1)
    padding, stride = _pair(padding, "padding", 0), _pair(stride, "stride", 1)
    if input.ndim != 4:
        raise ValueError(f"unfold: expected a 4-D (N, C, H, W) input, got shape "
                         f"{tuple(input.shape)}")
    _check_fits("unfold", kernel_extent(kernel_size, dilation),
                _padded(input.shape[2:], padding))
    return conv_ops.unfold(input, kernel_size=kernel_size, dilation=dilation, padding=padding,
                           stride=stride)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, the adjoint of `unfold`: sums the columns (N, C * kh * kw, L) back into an
    (N, C, H, W) image; overlapping blocks add up."""
    output_size = _pair(output_size, "output_size", 1)
    kernel_size, dilation = _pair(kernel_size, "kernel_size", 1), _pair(dilation, "dilation", 1)
    padding, stride = _pair(padding, "padding", 0), _pair(stride, "stride", 1)
    taps = kernel_size[0] * kernel_size[1]
    _check_fits("fold", kernel_extent(kernel_size, dilation), _padded(output_size, padding))
    oh, ow = sliding_output_size(output_size, kernel_size, dilation, padding, stride)
    if input.ndim != 3 or input.shape[1] % taps or input.shape[2] != oh * ow:
        raise ValueError(f"fold: expected an input of shape (N, C * {taps}, {oh * ow}) for "
                         f"kernel {kernel_size} and output size {output_size}, got shape "
                         f"{tuple(input.shape)}")
    return conv_ops.fold(input, output_size=output_size, kernel_size=kernel_size,
                         dilation=dilation, padding=padding, stride=stride)


def _padded(size, padding):
    return tuple(n + 2 * p for n, p in zip(size, padding))


def _same_padding(kernel_size, dilation, stride):
    """torch's padding='same': (before, after) per axis; odd totals put the extra at the end."""
    if stride != (1, 1):
        raise ValueError(f"padding='same' is not supported for strided convolutions "
                         f"(stride={stride})")
    totals = [d * (k - 1) for k, d in zip(kernel_size, dilation)]
    return [(t // 2, t - t // 2) for t in totals]


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation: im2col and a GEMM per chunk of samples (grouped: per sample, one
    batched matrix product over the groups).

    weight is (out_channels, in_channels // groups, kh, kw); padding is an int, a pair,
    'valid' or 'same'.
    """
    x, unbatched = _batched_image(input, "conv2d")
    if weight.ndim != 4:
        raise ValueError(f"conv2d: expected a 4-D weight (out_channels, in_channels / groups, "
                         f"kh, kw), got shape {tuple(weight.shape)}")
    out_channels, group_channels, kh, kw = weight.shape
    if not isinstance(groups, numbers.Integral) or groups < 1 or out_channels % groups:
        raise ValueError(f"conv2d: groups must be a positive integer dividing out_channels "
                         f"({out_channels}), got {groups!r}")
    if x.shape[1] != group_channels * groups:
        raise ValueError(f"conv2d: expected input with {group_channels * groups} channels, got "
                         f"{x.shape[1]} (input shape {tuple(input.shape)})")
    stride, dilation = _pair(stride, "stride", 1), _pair(dilation, "dilation", 1)
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        sides = _same_padding((kh, kw), dilation, stride)
        if any(before != after for before, after in sides):
            (top, bottom), (left, right) = sides
            x = ops.pad(x, (0, right - left, 0, bottom - top))
        padding = (sides[0][0], sides[1][0])
    else:
        padding = _pair(padding, "padding", 0)
    check_same_dtype("expected scalar type {} but found {}", x, weight)
    check_same_dtype("Input type ({}) and bias type ({}) should be the same", x, bias)
    _check_fits("conv2d", kernel_extent((kh, kw), dilation), _padded(x.shape[2:], padding))
    out = conv_ops.conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                          groups=groups)
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation over (N, C, L) or (C, L) input: conv2d on a height-1 image, so it
    shares conv2d's kernels and their gradient and tangent rules.

    weight is (out_channels, in_channels // groups, k); padding is an int, a 1-tuple, 'valid'
    or 'same'.
    """
    if input.ndim not in (2, 3):
        raise ValueError(f"conv1d: expected a 2-D (C, L) or 3-D (N, C, L) input, got shape "
                         f"{tuple(input.shape)}")
    if weight.ndim != 3:
        raise ValueError(f"conv1d: expected a 3-D weight (out_channels, in_channels / groups, "
                         f"k), got shape {tuple(weight.shape)}")
    if not isinstance(padding, str):
        padding = (0,) + _single(padding, "padding", 0)
    out = conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                 (1,) + _single(stride, "stride", 1), padding,
                 (1,) + _single(dilation, "dilation", 1), groups)
    return out.squeeze(-2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """The adjoint of conv2d in its input (a "deconvolution"): each input pixel scatters its
    kernel-weighted copy onto a stride-spaced output grid, so the output is
    (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 per axis.

    weight is (in_channels, out_channels // groups, kh, kw), torch's layout, which is the
    layout of the conv2d whose input gradient this is.
    """
    if input.ndim not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, "
                           f"but got input of size: {list(input.shape)}")
    x, unbatched = _batched_image(input, "conv_transpose2d")
    if weight.ndim != 4:
        raise RuntimeError(f"conv_transpose2d: expected a 4-D weight (in_channels, "
                           f"out_channels / groups, kh, kw), got size {list(weight.shape)}")
    in_channels, group_channels, kh, kw = weight.shape
    if not isinstance(groups, numbers.Integral) or groups < 1 or in_channels % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size {list(weight.shape)} instead")
    if x.shape[1] != in_channels:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{list(x.shape)} to have {in_channels} channels, but got "
                           f"{x.shape[1]} channels instead")
    stride, dilation = _pair(stride, "stride", 1), _pair(dilation, "dilation", 1)
    padding, output_padding = _pair(padding, "padding", 0), _pair(output_padding,
                                                                   "output_padding", 0)
    if any(o >= max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but "
                           f"got output_padding {output_padding}, stride {stride}, dilation "
                           f"{dilation}")
    check_same_dtype("expected scalar type {} but found {}", x, weight)
    check_same_dtype("Input type ({}) and bias type ({}) should be the same", x, bias)
    extent = kernel_extent((kh, kw), dilation)
    size = tuple((n - 1) * s - 2 * p + e + o for n, s, p, e, o in
                 zip(x.shape[2:], stride, padding, extent, output_padding))
    if min(size) < 1:
        raise RuntimeError(f"Given input size per channel: {tuple(x.shape[2:])}. Calculated "
                           f"output size per channel: {size}. Output size is too small")
    # An output_padding of at least the stride (allowed when the dilation is larger) gives an
    # output whose convolution has more positions than x: those see zeros.
    windows = sliding_output_size(size, (kh, kw), dilation, padding, stride)
    if windows != tuple(x.shape[2:]):
        x = ops.pad(x, (0, windows[1] - x.shape[3], 0, windows[0] - x.shape[2]))
    out = conv_ops.conv_transpose2d(x, weight, input_size=size, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups)
    if bias is not None:
        out = out + bias.reshape(-1, 1, 1)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """conv_transpose2d over (N, C, L) or (C, L) input, on a height-1 image; weight is
    (in_channels, out_channels // groups, k)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2D (unbatched) or 3D (batched) input to conv_transpose1d, "
                           f"but got input of size: {list(input.shape)}")
    if weight.ndim != 3:
        raise RuntimeError(f"conv_transpose1d: expected a 3-D weight (in_channels, "
                           f"out_channels / groups, k), got size {list(weight.shape)}")
    out = conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                           (1,) + _single(stride, "stride", 1),
                           (0,) + _single(padding, "padding", 0),
                           (0,) + _single(output_padding, "output_padding", 0), groups,
                           (1,) + _single(dilation, "dilation", 1))
    return out.squeeze(-2)


# ----------------------------------------------------------------------------- pooling
def _check_pool_padding(what, padding, kernel_size):
    if any(2 * p > k for p, k in zip(padding, kernel_size)):
        raise ValueError(f"{what}: padding {padding} should be at most half of the kernel size "
                         f"{kernel_size}")


def _check_divisor(divisor_override, what):
    if divisor_override is not None and (not isinstance(divisor_override, numbers.Integral)
                                         or divisor_override <= 0):
        raise ValueError(f"{what}: divisor_override must be a positive integer, got "
                         f"{divisor_override!r}")


def _pool_geometry(what, size, kernel_size, stride, padding, dilation, ceil_mode):
    """Output size, and extra bottom/right padding that ceil_mode needs, for a pooling window."""
    _check_pool_padding(what, padding, kernel_size)
    extent = kernel_extent(kernel_size, dilation)
    _check_fits(what, extent, _padded(size, padding))
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
    kernel_size = _pair(kernel_size, "kernel_size", 1)
    stride = kernel_size if stride is None else _pair(stride, "stride", 1)
    padding, dilation = _pair(padding, "padding", 0), _pair(dilation, "dilation", 1)
    n, c, h, w = x.shape
    _, extra = _pool_geometry("max_pool2d", (h, w), kernel_size, stride, padding, dilation,
                              ceil_mode)
    geometry = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
                    extra=extra)
    out = conv_ops.max_pool2d(x, **geometry)
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    # One winner per window (the first maximum), as torch returns.
    taps = conv_ops.winning_taps(x.data, out.data, **geometry)
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
    kernel_size = _pair(kernel_size, "kernel_size", 1)
    stride = kernel_size if stride is None else _pair(stride, "stride", 1)
    padding = _pair(padding, "padding", 0)
    _check_divisor(divisor_override, "avg_pool2d")
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
                                  dilation=(1, 1), padding=(0, 0), stride=stride).data.sum(1)
    out = (sums / divisor).reshape(n, c, oh, ow)
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
    kernel_size = _single(kernel_size, "kernel_size", 1)
    stride = kernel_size if stride is None else _single(stride, "stride", 1)
    out = max_pool2d(_pool1d_as_2d(input, "max_pool1d"), (1,) + kernel_size, (1,) + stride,
                     (0,) + _single(padding, "padding", 0),
                     (1,) + _single(dilation, "dilation", 1), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """Mean over each window of the last dimension (avg_pool2d on a height-1 image)."""
    kernel_size = _single(kernel_size, "kernel_size", 1)
    stride = kernel_size if stride is None else _single(stride, "stride", 1)
    return avg_pool2d(_pool1d_as_2d(input, "avg_pool1d"), (1,) + kernel_size, (1,) + stride,
                      (0,) + _single(padding, "padding", 0), ceil_mode,
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
    planes = input.data
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


# ----------------------------------------------------------------------------- activations
def relu(input, inplace=False):
    return input.relu_() if inplace else ops.relu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = ops.where(input > 0, input, input * negative_slope)
    return input.copy_(out) if inplace else out


def gelu(input, approximate="none"):
    return ops.gelu(input, approximate=approximate)


def silu(input):
    return input * ops.sigmoid(input)


def tanh(input):
    return ops.tanh(input)


def sigmoid(input):
    return ops.sigmoid(input)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """Softmax along `dim`. Without `dim`, torch's deprecated guess (with its warning): dim 0
    for 0-, 1- and 3-d input, else 1. `dtype` casts the input first."""
    return ops.softmax(_cast(input, dtype), _softmax_dim("softmax", input, dim, _stacklevel))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """Log-softmax along `dim`; `dim` and `dtype` as in `softmax`."""
    return ops.log_softmax(_cast(input, dtype),
                           _softmax_dim("log_softmax", input, dim, _stacklevel))


def _softmax_dim(name, input, dim, stacklevel):
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. "
                  "Change the call to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if input.ndim in (0, 1, 3) else 1


def _cast(input, dtype):
    return input if dtype is None else input.to(dtype)


# ----------------------------------------------------------------------------- regularisation
def _check_probability(p, what):
    if not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"{what} has to be between 0 and 1, but got {p!r}")


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes each element with probability p (mask from mpigrad's default generator) and
    scales the rest by 1/(1-p), so the expectation is unchanged; the identity when not
    training."""
    _check_probability(p, "dropout probability")
    return _masked_dropout(input, p, training, inplace, input.shape)


def _masked_dropout(input, p, training, inplace, mask_shape):
    """Dropout with one keep/drop draw per element of `mask_shape`, broadcast over input."""
    if not training or p == 0:
        return input
    keep = random.uniform_array(mask_shape, 0.0, 1.0, np.float64) >= p
    scale = Tensor.wrap(keep.astype(input.dtype) / (1 - p) if p < 1
                        else np.zeros(mask_shape, input.dtype))
    return input.mul_(scale) if inplace else input * scale


def _feature_dropout(input, p, training, inplace):
    # One draw per (sample, channel): whole feature maps are kept or dropped.
    return _masked_dropout(input, p, training, inplace,
                           input.shape[:2] + (1,) * (input.ndim - 2))


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, L) or (C, L) input with probability p."""
    _check_probability(p, "dropout probability")
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           "input. Note that dropout1d exists to provide channel-wise dropout on "
                           "inputs with 1 spatial dimension, a channel dimension, and an optional "
                           "batch dimension (i.e. 2D or 3D inputs).")
    if input.ndim == 3:
        return _feature_dropout(input, p, training, inplace)
    # Unbatched: the channels are the first dimension.
    return _masked_dropout(input, p, training, inplace, (input.shape[0], 1))


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) input with probability p. As in torch, 3-d input
    is read as (N, C, L) with a warning, and other ranks are accepted with a warning."""
    _check_probability(p, "dropout probability")
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is "
                      "deprecated and will result in an error in a future release. To retain the "
                      "behavior and silence this warning, please use dropout instead. Note that "
                      "dropout2d exists to provide channel-wise dropout on inputs with 2 spatial "
                      "dimensions, a channel dimension, and an optional batch dimension (i.e. 3D "
                      "or 4D inputs).", stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
                      "1D dropout behavior is desired - input is interpreted as shape (N, C, L), "
                      "where C is the channel dim. This behavior will change in a future release "
                      "to interpret the input as one without a batch dimension, i.e. shape "
                      "(C, H, W). To maintain the 1D channel-wise dropout behavior, please switch "
                      "to using dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training, inplace)


# ----------------------------------------------------------------------------- normalisation
def _normalize(x, mean, var, eps):
    return (x - mean) / (var + eps).sqrt()


_MIXED_DTYPES = "mixed dtype (CPU): all inputs must share same datatype ({} and {})."


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalises over the trailing dimensions `normalized_shape` (biased variance)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) \
        else tuple(normalized_shape)
    if not shape or tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise ValueError(f"layer_norm: expected input with trailing shape {shape}, got shape "
                         f"{tuple(input.shape)}")
    check_same_dtype(_MIXED_DTYPES, input, weight, bias)
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    out = _normalize(input, input.mean(dims, keepdim=True),
                     input.var(dims, keepdim=True, correction=0), eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalises each sample's channels (dimension 1) in `num_groups` consecutive groups, each
    over its channels and all spatial positions (biased variance); weight and bias are per
    channel."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    check_same_dtype(_MIXED_DTYPES, input, weight, bias)
    grouped = input.reshape(input.shape[0], num_groups, -1)
    out = _normalize(grouped, grouped.mean(-1, keepdim=True),
                     grouped.var(-1, keepdim=True, correction=0), eps).reshape(input.shape)
    per_channel = (input.shape[1],) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalises each channel (dimension 1) over the batch and any spatial dimensions.

    In training, batch statistics are used (biased variance) and the running estimates, if
    given, are updated in place: running = (1 - momentum) * running + momentum * batch, with
    the unbiased variance. Otherwise the running estimates are used.
    """
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of shape (N, C, ...), got shape "
                         f"{tuple(input.shape)}")
    channels = input.shape[1]
    shape = (1, channels) + (1,) * (input.ndim - 2)
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (channels,):
            raise ValueError(f"batch_norm: expected {name} of shape ({channels},) for an input "
                             f"with {channels} channels, got shape {tuple(t.shape)}")
    check_same_dtype(_MIXED_DTYPES, input, running_mean, running_var, weight, bias)
    if training:
        count = input.numel() // channels
        if count <= 1:
            raise ValueError(f"expected more than 1 value per channel when training, got input "
                             f"of shape {tuple(input.shape)}")
        dims = (0,) + tuple(range(2, input.ndim))
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, keepdim=True, correction=0)
        _update_running_stats(running_mean, running_var, mean, var, count, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required when not "
                             "training")
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    return _normalize_per_channel(input, mean, var, weight, bias, eps)


def _update_running_stats(running_mean, running_var, mean, var, count, momentum):
    """running = (1 - momentum) * running + momentum * batch, with the unbiased variance of
    the `count` values per channel that `var` (biased) was taken over."""
    with grad_mode.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.reshape(-1), alpha=momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var.reshape(-1),
                                                alpha=momentum * count / (count - 1))


def _normalize_per_channel(input, mean, var, weight, bias, eps):
    """(input - mean) / sqrt(var + eps) * weight + bias, with one value per channel (dim 1)."""
    shape = (1, input.shape[1]) + (1,) * (input.ndim - 2)
    out = _normalize(input, mean, var, eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalises each sample's channels separately, over their spatial dimensions (biased
    variance). With use_input_stats the running estimates, if given, move towards the
    batch's average of the per-instance statistics (unbiased variance); without, they are
    what normalises."""
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input of shape (N, C, ...) with at least "
                         f"one spatial dimension, got shape {tuple(input.shape)}")
    channels = input.shape[1]
    shape = (1, channels) + (1,) * (input.ndim - 2)
    check_same_dtype(_MIXED_DTYPES, input, running_mean, running_var, weight, bias)
    if use_input_stats:
        count = input.numel() // (input.shape[0] * channels)
        if count <= 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size {list(input.shape)}")
        dims = tuple(range(2, input.ndim))
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, keepdim=True, correction=0)
        with grad_mode.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(mean.mean(0).reshape(channels),
                                                     alpha=momentum)
            if running_var is not None:
                running_var.mul_(1 - momentum).add_(var.mean(0).reshape(channels),
                                                    alpha=momentum * count / (count - 1))
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    out = _normalize(input, mean, var, eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


# ----------------------------------------------------------------------------- embedding
def _check_indices(indices, size, what, name):
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{what}: expected indices of an integer dtype, got {indices.dtype}")
    bad = (indices < 0) | (indices >= size)
    if bad.any():
        raise IndexError(f"{what}: index {indices[bad].flat[0]} is out of range for "
                         f"{name}={size} (expected 0 <= index < {size})")


def _embedding_options(num_embeddings, padding_idx, scale_grad_by_freq, sparse, what):
    """Checks the options; returns padding_idx as a non-negative row (or None)."""
    if sparse:
        raise NotImplementedError(f"{what}: sparse gradients are not supported")
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{what}: padding_idx must be within num_embeddings "
                         f"({num_embeddings}), got {padding_idx}")
    return padding_idx % num_embeddings


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` picked by the integer tensor `input`; repeated indices add their
    gradients. The padding_idx row gets no gradient. With max_norm, the picked rows are first
    rescaled in place to norm at most max_norm (as torch does). With scale_grad_by_freq, each
    row's gradient is divided by its index's count in input."""
    padding_idx = _embedding_options(weight.shape[0], padding_idx, scale_grad_by_freq, sparse,
                                     "embedding")
    input = _as_tensor(input)
    _check_indices(input.data, weight.shape[0], "embedding", "num_embeddings")
    if max_norm is not None:
        _renorm_rows(weight, np.unique(input.data), max_norm, norm_type)
    rows = weight[input]
    if scale_grad_by_freq and rows.requires_grad:
        # Each looked-up row's gradient divided by how often its index occurs in input; the
        # value (and the tangent) are untouched, as in torch.
        _, where_from, counts = np.unique(input.data, return_inverse=True, return_counts=True)
        scale = Tensor.wrap((1.0 / counts[where_from.reshape(input.shape)])[..., None]
                            .astype(weight.dtype))
        rows.register_hook(lambda grad: grad * scale)
    if padding_idx is not None:
        keep = input.data != padding_idx
        if not keep.all():
            rows = ops.where(Tensor.wrap(keep[..., None]), rows, rows.detach())
    return rows


def _renorm_rows(weight, rows, max_norm, norm_type):
    with grad_mode.no_grad():
        picked = weight.data[rows]
        norms = np.linalg.norm(picked, ord=norm_type, axis=1, keepdims=True)
        # torch's embedding_renorm_ adds 1e-7 to the norm.
        scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[rows] = (picked * scale).astype(weight.dtype)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dimension; num_classes=-1 means max + 1."""
    tensor = _as_tensor(tensor)
    if tensor.dtype.kind not in "iu":
        raise TypeError(f"one_hot: expected an integer tensor, got {tensor.dtype}")
    if num_classes == -1:
        num_classes = int(tensor.data.max()) + 1 if tensor.data.size else 0
    _check_indices(tensor.data, num_classes, "one_hot", "num_classes")
    return Tensor.wrap((tensor.data[..., None] == np.arange(num_classes)).astype(np.int64))


# ----------------------------------------------------------------------------- losses
__all__ += ["l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
            "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss",
            "margin_ranking_loss", "triplet_margin_loss", "gaussian_nll_loss", "poisson_nll_loss",
            "pairwise_distance", "triplet_margin_with_distance_loss", "soft_margin_loss",
            "hinge_embedding_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
            "multilabel_margin_loss", "ctc_loss"]


def _check_reduction(reduction, extra=()):
    if reduction not in ("mean", "sum", "none") + extra:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduction(size_average, reduce, reduction, extra=()):
    """`reduction`, or what torch makes of the deprecated size_average and reduce flags (each
    True when left out): no reduce gives 'none', else 'mean' or 'sum' by size_average."""
    if size_average is None and reduce is None:
        _check_reduction(reduction, extra)
        return reduction
    if reduce is False:
        reduction = "none"
    else:
        reduction = "sum" if size_average is False else "mean"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction}' instead.", stacklevel=3)
    return reduction


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _size(tensor):
    return f"torch.Size({list(tensor.shape)})"


def _dtype_name(dtype):
    """torch's name (Double, Long, ...) for a numpy dtype, as its dtype errors print it."""
    name = np.dtype(dtype).name
    return {"float64": "Double", "float32": "Float", "float16": "Half"}.get(
        name, _SCALAR_TYPE_NAMES.get(name, name))


def _check_broadcast(a, b):
    """torch's RuntimeError for shapes that do not broadcast, naming the last dimension where
    they clash (numpy's would be a ValueError)."""
    ndim = max(len(a), len(b))
    shape_a = (1,) * (ndim - len(a)) + tuple(a)
    shape_b = (1,) * (ndim - len(b)) + tuple(b)
    for i in reversed(range(ndim)):
        if shape_a[i] != shape_b[i] and 1 not in (shape_a[i], shape_b[i]):
            raise RuntimeError(f"The size of tensor a ({shape_a[i]}) must match the size of "
                               f"tensor b ({shape_b[i]}) at non-singleton dimension {i}")


def _difference(input, target):
    """input - target, broadcast against each other as torch's pointwise losses allow, with
    its warning when the shapes differ (a (N, 1) prediction against an (N,) target is the
    usual mistake: it gives an (N, N) loss)."""
    target = _as_tensor(target)
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({_size(target)}) that is different to the input "
                      f"size ({_size(input)}). This will likely lead to incorrect results due to "
                      f"broadcasting. Please ensure they have the same size.", stacklevel=3)
    _check_broadcast(input.shape, target.shape)
    return input - target


def _weighted_reduce(loss, weight, input, reduction, mean_over_weight):
    """A pointwise loss times an elementwise weight of the input's shape; 'mean' divides by
    the summed weight (l1, mse) or by the element count (huber), as torch does."""
    if weight is None:
        return _reduce(loss, reduction)
    if weight.shape != input.shape:
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean" and mean_over_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """|input - target|, elementwise."""
    reduction = _reduction(size_average, reduce, reduction)
    loss = _difference(input, target).abs()
    if reduction == "mean" and weight is None and loss.dtype.kind not in "fc":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {_dtype_name(loss.dtype)}")
    return _weighted_reduce(loss, weight, input, reduction, True)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Squared error, elementwise."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_floating(input, "mse")
    diff = _difference(input, target)
    return _weighted_reduce(diff * diff, weight, input, reduction, True)


def _huber(diff, delta):
    """0.5 d^2 for |d| < delta, delta (|d| - delta / 2) beyond: quadratic near zero, linear
    with slope delta outside, continuous in value and slope."""
    size = diff.abs()
    return ops.where(size < delta, 0.5 * diff * diff, delta * (size - 0.5 * delta))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Huber's loss divided by beta: slope one outside |d| < beta; beta = 0 is l1_loss."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_floating(input, "smooth_l1")
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    diff = _difference(input, target)
    if beta == 0:
        return _reduce(diff.abs(), reduction)
    return _reduce(_huber(diff, beta) / beta, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """Quadratic for |input - target| < delta, linear with slope delta beyond."""
    _check_reduction(reduction)
    _check_floating(input, "huber")
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    return _weighted_reduce(_huber(_difference(input, target), delta), weight, input, reduction,
                            False)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)) for probabilities x, each log clamped at -100."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({_size(target)}) that is different to the input "
                         f"size ({_size(input)}) is deprecated. Please ensure they have the same "
                         f"size.")
    if target.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {_dtype_name(target.dtype)} but expected "
                           f"{_dtype_name(input.dtype)}")
    for name, values in (("input", input.data), ("target", target.data)):
        if not ((values >= 0) & (values <= 1)).all():
            raise RuntimeError(f"all elements of {name} should be between 0 and 1")
    loss = ops.binary_cross_entropy(input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """binary_cross_entropy(sigmoid(x), t) without forming sigmoid(x):
    (1 - t) x - w_t log sigmoid(x), w_t = 1 + (pos_weight - 1) t, finite for any |x|.

    pos_weight scales the positive term per class, broadcasting like any operand (so a (C,)
    pos_weight meets the last dimension of an (N, C) input)."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({_size(target)}) must be the same as input size "
                         f"({_size(input)})")
    if target.dtype.kind != "f":
        raise RuntimeError(f"result type {_dtype_name(input.dtype)} can't be cast to the desired "
                           f"output type {_dtype_name(target.dtype)}")
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * input - log_weight * ops.log_sigmoid(input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence t (log t - x) of a target from log-probabilities x (0 where
    t = 0); with log_target the target is log t. 'batchmean' divides the sum by the batch
    size, the mathematical KL divergence of each sample; 'mean' divides by every element."""
    legacy = size_average is not None or reduce is not None
    reduction = _reduction(size_average, reduce, reduction, extra=("batchmean",))
    if reduction == "mean" and not legacy:
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", stacklevel=2)
    target = _as_tensor(target)
    _check_broadcast(input.shape, target.shape)
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        # t log t with its limit 0 at t = 0, and a finite gradient there (torch's is 0 / 0).
        zero = Tensor.wrap(target.data == 0)
        loss = ops.where(zero, 0.0, target * ops.log(ops.where(zero, 1.0, target))) - target * input
    if reduction != "batchmean":
        return _reduce(loss, reduction)
    return loss.sum() / input.shape[0] if input.ndim else loss.sum()


# Added to each squared norm so that cos stays finite for a zero vector; torch's is the
# float32 constant 1e-12 in every dtype, so the same here.
_COSINE_EPSILON = float(np.float32(1e-12))


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where the target is 1, max(0, cos - margin) where it is -1 (0 for any
    other target); rows are compared, or two vectors for a 0-d target."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    if target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input1.ndim != target.ndim + 1 or input2.ndim != target.ndim + 1:
        raise RuntimeError(f"{target.ndim}D target tensor expects {target.ndim + 1}D input "
                           f"tensors, but found inputs with sizes {list(input1.shape)} and "
                           f"{list(input2.shape)}.")
    _check_broadcast(input1.shape, input2.shape)
    dim = target.ndim
    squares = (((input1 * input1).sum(dim) + _COSINE_EPSILON)
               * ((input2 * input2).sum(dim) + _COSINE_EPSILON))
    cos = (input1 * input2).sum(dim) / squares.sqrt()
    t = target.data
    loss = (ops.where(Tensor.wrap(t == 1), 1 - cos, 0.0)
            + ops.where(Tensor.wrap(t == -1), ops.clamp(cos - margin, min=0.0), 0.0))
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -t (x1 - x2) + margin): x1 should rank above x2 by the margin where t = 1,
    below where t = -1."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {_size(input1)}, input2: {_size(input2)}, "
                           f"target: {_size(target)} ")
    _check_broadcast(input1.shape, input2.shape)
    _check_broadcast(np.broadcast_shapes(input1.shape, input2.shape), target.shape)
    return _reduce(ops.clamp(-target * (input1 - input2) + margin, min=0.0), reduction)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dimension (the eps keeps the norm away from
    0, where its gradient is undefined)."""
    _check_broadcast(x1.shape, x2.shape)
    diff = x1 - x2 + eps
    if p in (1, 2):
        return ops.norm(diff, p=p, dim=-1, keepdim=keepdim)
    size = diff.abs()
    if p == np.inf:
        return size.amax(-1, keepdim=keepdim)
    if p == -np.inf:
        return size.amin(-1, keepdim=keepdim)
    if p == 0:
        # The count of nonzero entries: piecewise constant, so its gradient is zero, as in
        # torch (the zero sum keeps the result on the graph).
        count = (size.data != 0).sum(-1, keepdims=keepdim).astype(size.dtype)
        return (size * 0).sum(-1, keepdim=keepdim) + Tensor.wrap(count)
    return (size ** p).sum(-1, keepdim=keepdim) ** (1 / p)


def _triplet_loss(anchor, positive, negative, distance, margin, swap, reduction):
    """max(0, margin + d(a, p) - d(a, n)); swap uses d(p, n) instead of d(a, n) where it is
    smaller (Balntas et al., 2016)."""
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the "
                           f"same number of dimensions, but got: anchor {anchor.ndim}D, positive "
                           f"{positive.ndim}D, and negative {negative.ndim}D inputs")
    positive_distance = distance(anchor, positive)
    negative_distance = distance(anchor, negative)
    if swap:
        negative_distance = ops.minimum(negative_distance, distance(positive, negative))
    return _reduce(ops.clamp(margin + positive_distance - negative_distance, min=0.0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """The triplet loss with pairwise_distance(p, eps) between rows."""
    reduction = _reduction(size_average, reduce, reduction)
    return _triplet_loss(anchor, positive, negative,
                         lambda x1, x2: pairwise_distance(x1, x2, p, eps), margin, swap,
                         reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """The triplet loss with any distance function (default pairwise_distance)."""
    _check_reduction(reduction)
    return _triplet_loss(anchor, positive, negative, distance_function or pairwise_distance,
                         margin, swap, reduction)


def _gaussian_var(var, input):
    """var shaped to broadcast against input, as torch accepts it: input's shape, input's
    shape without its last dimension, or input's shape with one dimension of size 1."""
    if var.shape == input.shape:
        return var
    if var.shape == input.shape[:-1]:
        return var.unsqueeze(-1)
    mismatched = [v for i, v in zip(input.shape, var.shape) if i != v]
    if var.ndim == input.ndim and mismatched == [1]:
        return var
    raise ValueError("var is of incorrect size")


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Negative log-likelihood of target under N(input, var): (log var + (x - t)^2 / var) / 2,
    plus log(2 pi) / 2 if full. var is clamped at eps, the gradient passing the clamp as if
    it were not there (torch clamps without recording)."""
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = Tensor.wrap(np.full(input.shape, var, input.dtype))
    elif not isinstance(var, Tensor):
        raise TypeError(f"gaussian_nll_loss: var must be a Tensor or a float, got "
                        f"{type(var).__name__}")
    elif (var.data < 0).any():
        raise ValueError("var has negative entry/entries")
    var = _gaussian_var(var, input)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not valid")
    var = var + (ops.clamp(var, min=eps) - var).detach()
    target = _as_tensor(target)
    _check_broadcast(input.shape, target.shape)
    diff = input - target
    loss = 0.5 * (ops.log(var) + diff * diff / var)
    if full:
        loss = loss + 0.5 * float(np.log(2 * np.pi))  # a numpy scalar would promote float32
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """Negative log-likelihood of counts t under Poisson(rate): exp(x) - t x for a log-rate
    x (log_input), else x - t log(x + eps); full adds Stirling's t log t - t + log(2 pi t) / 2
    for log(t!) where t > 1."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    _check_broadcast(input.shape, target.shape)
    if log_input:
        loss = ops.exp(input) - target * input
    else:
        loss = input - target * ops.log(input + eps)
    if full:
        small = Tensor.wrap(target.data <= 1)
        # Where t <= 1 the term is dropped; its log would see 0 or a negative there.
        with np.errstate(divide="ignore", invalid="ignore"):
            stirling = (target * ops.log(target) - target
                        + 0.5 * ops.log(2 * np.pi * target))
        loss = loss + stirling.masked_fill(small, 0.0)
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-t x)), the logistic loss of a +-1 target (as -log sigmoid(t x), finite
    where exp(-t x) would overflow)."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    _check_broadcast(input.shape, target.shape)
    return _reduce(-ops.log_sigmoid(target * input), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """x where the target is 1, max(0, margin - x) where it is -1 (for x a distance)."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    _check_broadcast(input.shape, target.shape)
    t = target.data
    return _reduce(ops.where(Tensor.wrap(t != 1), ops.clamp(margin - input, min=0.0), 0.0)
                   + ops.where(Tensor.wrap(t != -1), input, 0.0), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """Binary logistic loss of each class against a 0/1 target, averaged over the classes
    (the last dimension)."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _as_tensor(target)
    _check_broadcast(input.shape, target.shape)
    loss = -(target * ops.log_sigmoid(input) + (1 - target) * ops.log_sigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.sum(-1) / input.shape[-1], reduction)


def _check_margin_scores(input):
    if input.ndim > 2 or input.numel() == 0:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, "
                           f"but got: {list(input.shape)}")


def _check_long(target):
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"expected scalar type Long but found {_dtype_name(target.dtype)}")


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """The multi-class hinge loss of class-index targets y: per sample, the sum over classes
    i != y of w[y] max(0, margin - x[y] + x[i])^p, divided by the number of classes."""
    reduction = _reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    _check_margin_scores(input)
    t = _as_tensor(target).data
    if input.ndim == 1 and t.shape == (1,):
        t = t.reshape(())
    expected = input.shape[:-1]
    if t.shape != expected:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to "
                           f"the number of input samples (batch size). Expected target size "
                           f"{list(expected)}, but got {list(t.shape)}. Input has shape "
                           f"{list(input.shape)}.")
    _check_long(t)
    classes = input.shape[-1]
    if ((t < 0) | (t >= classes)).any():
        raise RuntimeError("target out of range")
    if weight is not None and weight.shape[0] != classes:
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got "
                           f"{list(weight.shape)}")
    index = t[..., None]
    # relu, not clamp: torch's gradient is zero where the margin is met exactly.
    hinge = ops.relu(margin - ops.take_along_dim(input, index, -1) + input)
    if p == 2:
        hinge = hinge * hinge
    # The target's own class is left out; the class weight is torch's constant, not learned.
    scale = (np.arange(classes) != index) / classes
    if weight is not None:
        scale = scale * weight.data[index]
    return _reduce((hinge * Tensor.wrap(scale.astype(input.dtype))).sum(-1), reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Hinge between each target class j and each other class i: per sample, the sum of
    max(0, 1 - (x[j] - x[i])) over both, divided by the number of classes. A row of target
    lists its classes first, ended by -1 where they are fewer than all."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_margin_scores(input)
    t = _as_tensor(target).data
    if t.shape != input.shape:
        raise RuntimeError(f"inconsistent target size: {list(t.shape)} for input of size: "
                           f"{list(input.shape)}")
    _check_long(t)
    classes = input.shape[-1]
    rows = t.reshape(-1, classes)
    if ((rows < -1) | (rows >= classes)).any():
        raise RuntimeError("argument #2 'target' is out of range")
    listed = np.cumprod(rows != -1, axis=1).astype(bool)
    # How often each class is listed (a repeated class counts each time, as in torch).
    counts = np.zeros(rows.shape, input.dtype)
    np.add.at(counts, (np.nonzero(listed)[0], rows[listed]), 1)
    pair_weight = counts[:, :, None] * (counts == 0)[:, None, :] / classes
    x = input.reshape(-1, classes)
    hinge = ops.relu(1 - x.unsqueeze(2) + x.unsqueeze(1))  # [n, j, i]: 1 - x[j] + x[i]
    loss = (hinge * Tensor.wrap(pair_weight)).sum((1, 2))
    return _reduce(loss.reshape(input.shape[:-1]), reduction)


def _lengths(values, what):
    """input_lengths or target_lengths (a tensor or a sequence of ints) as an int64 array."""
    array = np.asarray(values.data if isinstance(values, Tensor) else values)
    if array.dtype.kind not in "iu":
        raise RuntimeError(f"{what} must be integral")
    return array.astype(np.int64).reshape(-1)


def _ctc_labels(targets, target_lengths, batch, classes):
    """The targets as a (batch, longest) array, padded or concatenated as torch takes them."""
    t = np.asarray(targets.data if isinstance(targets, Tensor) else targets).astype(np.int64)
    longest = int(target_lengths.max(initial=0))
    if t.ndim == 1 and batch > 1 or t.ndim == 0:
        total = int(target_lengths.sum())
        if t.size != total:
            raise RuntimeError(f"Expected tensor to have size {total} at dimension 0, but got "
                               f"size {t.size} for argument #2 'targets'")
        labels = np.zeros((batch, longest), np.int64)
        labels[np.arange(longest) < target_lengths[:, None]] = t
    else:
        labels = t.reshape(batch, -1)
        if labels.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension 1, "
                               f"but got size {labels.shape[1]} for argument #2 'targets'")
        labels = labels[:, :longest]
    used = labels[np.arange(longest) < target_lengths[:, None]]
    if ((used < 0) | (used >= classes)).any():
        raise RuntimeError(f"ctc_loss: target labels must be in [0, {classes}), got "
                           f"{used[(used < 0) | (used >= classes)][0]}")
    return labels


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """Connectionist temporal classification (Graves et al., 2006): -log of the summed
    probability of every alignment of each target to its frames of log_probs (T, N, C), by
    the forward recursion over the target with blanks between and around its labels.

    As torch's, the gradient with respect to log_probs is the one for the logits of a
    log_softmax producing them: it carries an extra exp(log_probs) in each frame within the
    input length, which log_softmax's own gradient cancels."""
    _check_reduction(reduction)
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
    if log_probs.ndim != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs of shape (T, N, C) or (T, C), got "
                           f"{list(log_probs.shape)}")
    steps, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    input_lengths = _lengths(input_lengths, "input_lengths")
    target_lengths = _lengths(target_lengths, "target_lengths")
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.shape != (batch,):
            raise RuntimeError(f"{name} must be of size batch_size")
        if lengths.min(initial=0) < 0:
            raise RuntimeError(f"Expected {name} to have value at least 0, but got value "
                               f"{lengths.min()}")
    if input_lengths.max(initial=0) > steps:
        raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got "
                           f"value {input_lengths.max()}")
    labels = _ctc_labels(targets, target_lengths, batch, classes)
    # The extended target: blank, l1, blank, l2, ..., blank; a path may skip the blank
    # between two different labels.
    width = 2 * labels.shape[1] + 1
    extended = np.full((batch, width), blank)
    extended[:, 1::2] = labels
    skip = np.zeros((batch, width), bool)
    skip[:, 3::2] = labels[:, 1:] != labels[:, :-1]
    emit = ops.take_along_dim(log_probs, np.broadcast_to(extended, (steps, batch, width)), 2)
    # log 0 as a finite number, so a logsumexp over impossible paths has a zero gradient
    # rather than 0 * inf; it is absorbed by any real log-probability added to it.
    log_zero = float(np.finfo(log_probs.dtype).min) / 4
    alpha = ops.where(Tensor.wrap(np.arange(width) < 2), emit[0], log_zero)
    running = Tensor.wrap((np.arange(steps)[:, None] < input_lengths)[..., None])
    skip = Tensor.wrap(skip)
    for t in range(1, steps):
        one_back = ops.pad(alpha, (1, 0), value=log_zero)[:, :width]
        two_back = ops.where(skip, ops.pad(alpha, (2, 0), value=log_zero)[:, :width], log_zero)
        step = ops.logsumexp(ops.stack([alpha, one_back, two_back]), 0) + emit[t]
        alpha = ops.where(running[t], step, alpha)
    last = 2 * target_lengths[:, None]
    before = ops.where(Tensor.wrap(last > 0),
                       ops.take_along_dim(alpha, np.maximum(last - 1, 0), 1), log_zero)
    loss = -ops.logsumexp(ops.cat([ops.take_along_dim(alpha, last, 1), before], 1), 1)
    frames = ops.exp(log_probs) * running
    loss = loss + (frames - frames.detach()).sum((0, 2))
    impossible = loss.data > -log_zero / 2
    if impossible.any():
        loss = ops.where(Tensor.wrap(impossible), 0.0 if zero_infinity else np.inf, loss)
    if reduction == "mean":
        lengths = np.maximum(target_lengths, 1).astype(log_probs.dtype)
        return (loss / Tensor.wrap(lengths)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss


# --- class scores: cross_entropy and nll_loss
def _check_weight(weight, classes, what=""):
    if weight is not None and tuple(weight.shape) != (classes,):
        raise RuntimeError(f"{what}weight tensor should be defined either for all {classes} "
                           f"classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")


def _class_dim(input):
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    return 0 if input.ndim == 1 else 1


def _class_target(scores, target, class_dim):
    """The class-index array of target after torch's checks against scores (C,) or
    (N, C, d1, ...); unbatched scores also take a target of shape (1,), as in torch."""
    t = target.data
    if scores.ndim == 1 and t.shape == (1,):
        t = t.reshape(())
    batch = t.shape[0] if t.ndim else 0
    if scores.ndim >= 2 and batch != scores.shape[0]:
        raise ValueError(f"Expected input batch_size ({scores.shape[0]}) to match target "
                         f"batch_size ({batch}).")
    expected = scores.shape[:class_dim] + scores.shape[class_dim + 1:]
    if t.shape != expected:
        if scores.ndim <= 2:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        raise RuntimeError(f"Expected target size {list(expected)}, got {list(t.shape)}")
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{_dtype_name(t.dtype)}")
    return t


def _class_target_loss(log_probs, target, weight, ignore_index, reduction, label_smoothing):
    """Negative log-likelihood of class-index targets, optionally smoothed towards uniform.

    Follows torch exactly: per element, (1 - s) * w[t] * -logp[t] + s / C * sum_c w[c] *
    -logp[c], zero where target == ignore_index; 'mean' divides by the summed w[t] of the
    targets that are not ignored.
    """
    class_dim = _class_dim(log_probs)
    classes = log_probs.shape[class_dim]
    t = _class_target(log_probs, target, class_dim)
    _check_weight(weight, classes)
    # The class dimension stays (with size 1) until 'none' drops it: one node fewer on the
    # common path, and the mask and weights line up with log_probs for broadcasting.
    index = np.expand_dims(t, class_dim)
    ignored = index == ignore_index
    any_ignored = bool(ignored.any())
    if any_ignored:
        index = np.where(ignored, 0, index)
    bad = (index < 0) | (index >= classes)
    if bad.any():
        raise IndexError(f"Target {index[bad].flat[0]} is out of bounds.")
    picked = ops.take_along_dim(log_probs, index, class_dim)
    # Weight of each element's target class; None when every element counts once.
    target_weight = None
    if weight is not None:
        target_weight = weight.data[index]
        if any_ignored:
            target_weight = np.where(ignored, 0, target_weight)
    elif any_ignored:
        target_weight = (~ignored).astype(log_probs.dtype)
    loss = -picked if target_weight is None else picked * Tensor.wrap(-target_weight)
    if label_smoothing > 0:
        per_class = log_probs if weight is None else log_probs * _along_classes(weight, log_probs,
                                                                                class_dim)
        smooth = -per_class.sum(class_dim, keepdim=True)
        if any_ignored:
            smooth = smooth.masked_fill(Tensor.wrap(ignored), 0.0)
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    if reduction == "none":
        return loss.squeeze(class_dim)
    if reduction == "sum":
        return loss.sum()
    if target_weight is None:
        return loss.mean()
    return loss.sum() / float(target_weight.sum())


def _along_classes(weight, scores, class_dim):
    """The per-class weight shaped to broadcast against scores (N, C, d1, ...)."""
    return weight.reshape(weight.shape + (1,) * (scores.ndim - 1 - class_dim))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class-index targets, given log-probabilities (N, C, ...)."""
    reduction = _reduction(size_average, reduce, reduction)
    return _class_target_loss(input, _as_tensor(target), weight, ignore_index, reduction, 0.0)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """log_softmax over the class dimension, then the negative log-likelihood of the target.

    Targets are class indices (N, d1, ...) of an integer dtype, or class probabilities of the
    input's shape (floating point; ignore_index does not apply, 'mean' averages over the
    N * d1 * ... elements).
    """
    reduction = _reduction(size_average, reduce, reduction)
    # As in torch, a negative label_smoothing is no smoothing rather than an error.
    if label_smoothing > 1:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    target = _as_tensor(target)
    class_dim = _class_dim(input)
    _check_floating(input, "log_softmax_lastdim_kernel_impl")
    log_probs = ops.log_softmax(input, class_dim)
    if target.shape != input.shape or target.dtype.kind != "f":
        return _class_target_loss(log_probs, target, weight, ignore_index, reduction,
                                  label_smoothing)
    if ignore_index >= 0:
        raise RuntimeError("ignore_index is not supported for floating point target")
    classes = input.shape[class_dim]
    _check_weight(weight, classes, "cross_entropy: ")
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    per_class = log_probs * target
    if weight is not None:
        per_class = per_class * _along_classes(weight, input, class_dim)
    return _reduce(-per_class.sum(class_dim), reduction)


# ----------------------------------------------------------------------------- pixel shuffles
def _check_shuffle_input(what, input):
    if input.ndim < 3:
        raise RuntimeError(f"{what} expects input to have at least 3 dimensions, but got input "
                           f"with {input.ndim} dimension(s)")


def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r): each r x r block of output pixels comes from r^2
    consecutive channels."""
    _check_shuffle_input("pixel_shuffle", input)
    r = upscale_factor
    *batch, channels, h, w = input.shape
    if channels % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)="
                           f"{channels} is not divisible by {r * r}")
    k = len(batch)
    blocks = input.reshape(*batch, channels // (r * r), r, r, h, w)
    order = tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2)
    return blocks.permute(*order).reshape(*batch, channels // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """The inverse of pixel_shuffle: (*, C, H r, W r) -> (*, C r^2, H, W)."""
    _check_shuffle_input("pixel_unshuffle", input)
    r = downscale_factor
    *batch, channels, h, w = input.shape
    for axis, name, size in ((-2, "height", h), (-1, "width", w)):
        if size % r:
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by "
                               f"downscale_factor, but input.size({axis})={size} is not "
                               f"divisible by {r}")
    k = len(batch)
    blocks = input.reshape(*batch, channels, h // r, r, w // r, r)
    order = tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3)
    return blocks.permute(*order).reshape(*batch, channels * r * r, h // r, w // r)


# ----------------------------------------------------------------------------- adaptive pooling
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
        raise ValueError("Input dimension should be at least " + str(dims + 1))
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
    rows = _adaptive_mean_matrix(input.shape[-2], height, input.dtype)
    columns = _adaptive_mean_matrix(input.shape[-1], width, input.dtype)
    return rows @ input @ columns.T


# ----------------------------------------------------------------------------- resampling
_LINEAR_MODES = {"linear": 3, "bilinear": 4, "trilinear": 5}


def _nearest_positions(size, out_size, scale, exact):
    """torch's nearest source index along one axis, computed in single precision as its
    kernel does (so a product that float rounds just below an integer floors as torch's)."""
    step = np.float32(1.0 / scale) if scale else np.float32(size) / np.float32(out_size)
    positions = np.arange(out_size, dtype=np.float32)
    if exact:
        positions += np.float32(0.5)
    return np.minimum(np.floor(positions * step).astype(np.int64), size - 1)


def _linear_positions(size, out_size, scale, align_corners, dtype):
    """torch's two source indices and the second one's weight along one axis."""
    if align_corners:
        step = (size - 1) / (out_size - 1) if out_size > 1 else 0.0
        source = np.arange(out_size, dtype=dtype) * dtype.type(step)
    else:
        step = dtype.type(1.0 / scale) if scale else dtype.type(size) / dtype.type(out_size)
        source = np.maximum((np.arange(out_size, dtype=dtype) + dtype.type(0.5)) * step
                            - dtype.type(0.5), 0)
    first = source.astype(np.int64)
    return first, np.minimum(first + 1, size - 1), source - first


def _resampling_sizes(input, size, scale_factor, recompute_scale_factor):
    """The output size, and the scales the kernels use (None: in / out), per spatial axis."""
    dims = input.ndim - 2
    spatial = list(input.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None
                         else "either size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = [size] * dims if isinstance(size, numbers.Integral) else list(size)
        if len(sizes) != dims:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, "
                             f"but got input with spatial dimensions of {spatial} and output "
                             f"size of {size}. Please provide input tensor in (N, C, d1, d2, "
                             f"...,dK) format and output size in (o1, o2, ...,oK) format.")
        return [int(s) for s in sizes], [None] * dims
    scales = [scale_factor] * dims if isinstance(scale_factor, numbers.Number) \
        else list(scale_factor)
    if len(scales) != dims:
        raise ValueError(f"Input and scale_factor must have the same number of spatial "
                         f"dimensions, but got input with spatial dimensions of {spatial} and "
                         f"scale_factor of shape {scale_factor}. Please provide input tensor in "
                         f"(N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) "
                         f"format.")
    sizes = [int(np.floor(float(n * s))) for n, s in zip(spatial, scales)]
    return sizes, [None] * dims if recompute_scale_factor else [float(s) for s in scales]


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resamples the spatial dimensions of (N, C, *spatial) input to `size`, or by
    `scale_factor`: 'nearest' and 'nearest-exact' copy a source pixel, 'linear', 'bilinear'
    and 'trilinear' mix the two nearest along each axis (pixel centres aligned, or corners
    with align_corners), 'area' averages torch's adaptive bins. Each axis is one gather (and
    a weighted sum), so gradients and tangents come from the gathers'."""
    modes = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")
    if align_corners is not None and mode not in _LINEAR_MODES and mode != "bicubic":
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if mode not in modes or input.ndim not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{input.ndim}D) for the modes: nearest | linear | bilinear | "
                                  f"bicubic | trilinear | lanczos | area | nearest-exact (got "
                                  f"{mode})")
    if mode in _LINEAR_MODES and input.ndim != _LINEAR_MODES[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{_LINEAR_MODES[mode]}D input")
    if mode == "bicubic" or antialias:
        raise NotImplementedError("interpolate: bicubic mode and antialias are not supported")
    sizes, scales = _resampling_sizes(input, size, scale_factor, recompute_scale_factor)
    if min(sizes) <= 0:
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"{tuple(input.shape[2:])} output {tuple(sizes)}")
    if mode == "area":
        if input.ndim == 5:
            raise NotImplementedError("interpolate: mode 'area' of 5-D input is not supported")
        pool = adaptive_avg_pool1d if input.ndim == 3 else adaptive_avg_pool2d
        return pool(input, sizes if input.ndim == 4 else sizes[0])
    out = input
    # The last axis first: torch mixes along it innermost, and its gathers (the slow ones,
    # element by element) then run on the smaller array when upsampling.
    axes = list(enumerate(zip(input.shape[2:], sizes, scales), start=2))
    for axis, (n, m, scale) in reversed(axes):
        before = (slice(None),) * axis
        if mode.startswith("nearest"):
            out = out[before + (_nearest_positions(n, m, scale, mode == "nearest-exact"),)]
            continue
        first, second, weight = _linear_positions(n, m, scale, bool(align_corners),
                                                  np.dtype(input.dtype))
        weight = Tensor(weight.reshape((m,) + (1,) * (input.ndim - 1 - axis)))
        out = out[before + (first,)] * (1 - weight) + out[before + (second,)] * weight
    return out


# ----------------------------------------------------------------------------- attention
__all__ += ["scaled_dot_product_attention", "multi_head_attention_forward", "rms_norm",
            "normalize", "cosine_similarity"]

# The scalar type names torch's C++ checks print, for messages that quote them.
_CPP_NAMES = {"float16": "c10::Half", "float32": "float", "float64": "double",
              "int8": "signed char", "uint8": "unsigned char", "int16": "short int",
              "int32": "int", "int64": "long int", "bool": "bool"}


def _cpp_name(dtype):
    return _CPP_NAMES.get(np.dtype(dtype).name, np.dtype(dtype).name)


def _check_attention_inputs(query, key, value, attn_mask, dropout_p):
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, "
                           f"but got query.dim: {query.ndim} key.dim: {key.ndim} and value.dim: "
                           f"{value.ndim} instead.")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {_cpp_name(query.dtype)} key.dtype: "
                           f"{_cpp_name(key.dtype)} and value.dtype: {_cpp_name(value.dtype)} "
                           f"instead.")
    if attn_mask is not None and attn_mask.dtype != np.bool_ \
            and attn_mask.dtype.kind != "f" and attn_mask.dtype != query.dtype:
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                           f"dtype, but got attn_mask.dtype: {_cpp_name(attn_mask.dtype)} and  "
                           f"query.dtype: {_cpp_name(query.dtype)} instead.")
    if not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p <= 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention: query and key must have the same "
                           f"embedding size, got {query.shape[-1]} and {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: key and value must have the same "
                           f"sequence length, got {key.shape[-2]} and {value.shape[-2]}")


def _check_mask_fits(mask, scores_shape):
    """The mask must broadcast to the scores' shape without enlarging it (torch adds it into
    the scores in place)."""
    shape = tuple(mask.shape)
    for axis in range(1, min(len(shape), len(scores_shape)) + 1):
        a, b = scores_shape[-axis], shape[-axis]
        if a != b and b != 1 and a != 1:
            raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b "
                               f"({b}) at non-singleton dimension {len(scores_shape) - axis}")
    broadcast = np.broadcast_shapes(shape, scores_shape)
    if broadcast != tuple(scores_shape):
        raise RuntimeError(f"output with shape {list(scores_shape)} doesn't match the broadcast "
                           f"shape {list(broadcast)}")


def _repeat_heads(x, repeats):
    """(..., Hk, S, d) -> (..., Hk * repeats, S, d), each head repeated in place (torch's
    repeat_interleave along the head dimension)."""
    *batch, heads, length, width = x.shape
    return (x.unsqueeze(-3).expand((*batch, heads, repeats, length, width))
            .reshape((*batch, heads * repeats, length, width)))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query key^T * scale + mask) value over the last two dimensions, batch
    dimensions broadcast. A bool mask keeps where True, a float mask is added; is_causal
    masks keys after each query (top-left aligned). Rows whose keys are all masked give zeros,
    as in torch. With enable_gqa, key and value heads (dimension -3) are repeated to the
    query's number of heads.

    Composed of differentiable ops (two products and a softmax that applies a bool mask
    itself), so double backward and tangents need no rule of their own; measured on a
    GPT-sized call (jobs/bench/bench_attention.py) this is within 10% of torch's fused CPU kernel,
    and a dedicated op could save at most the graph's overhead. The backward keeps one
    (..., L, S) array, the attention weights (the softmax's output, which the product with
    value reads too): the scores die after the softmax, and the scale is applied to the query
    so no (L, S) product is kept for it. Dropout adds its mask and the dropped weights, as in
    torch's math backend.
    """
    attn_mask = None if attn_mask is None else _as_tensor(attn_mask)
    _check_attention_inputs(query, key, value, attn_mask, dropout_p)
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 \
            and query.shape[-3] != key.shape[-3]:
        heads, key_heads, value_heads = query.shape[-3], key.shape[-3], value.shape[-3]
        if heads % key_heads or heads % value_heads:
            raise RuntimeError("Number of heads in key and value must divide the number of "
                               "heads in ")
        key = _repeat_heads(key, heads // key_heads)
        value = _repeat_heads(value, heads // value_heads)
    # A Python float, so float32 inputs stay float32.
    scale = 1.0 / float(np.sqrt(query.shape[-1])) if scale is None else float(scale)
    scores = (query * scale) @ key.transpose(-2, -1)
    if attn_mask is not None:
        _check_mask_fits(attn_mask, scores.shape)
    keep = None
    if is_causal:
        keep = np.tri(query.shape[-2], key.shape[-2], dtype=np.bool_)
    elif attn_mask is not None and attn_mask.dtype == np.bool_:
        keep = attn_mask.data
    elif attn_mask is not None:
        scores = scores + (attn_mask if attn_mask.dtype == scores.dtype
                           else attn_mask.to(scores.dtype))
    weights = ops.masked_softmax(scores, keep, dim=-1)
    if dropout_p > 0:
        weights = _masked_dropout(weights, dropout_p, True, False, weights.shape)
    return weights @ value


def _check_mha_shapes(query, key, value, key_padding_mask, attn_mask, num_heads):
    """torch's _mha_shape_check: whether the input is batched, with its assertions."""
    rank = query.ndim
    if rank not in (2, 3):
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received "
                             f"{rank}-D query tensor")
    kind = "batched (3-D)" if rank == 3 else "unbatched (2-D)"
    if key.ndim != rank or value.ndim != rank:
        raise AssertionError(f"For {kind} `query`, expected `key` and `value` to be {rank}-D but "
                             f"found {key.ndim}-D and {value.ndim}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.ndim != rank - 1:
        raise AssertionError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or "
                             f"{rank - 1}-D but found {key_padding_mask.ndim}-D tensor instead")
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise AssertionError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                             f"but found {attn_mask.ndim}-D tensor instead")
    if query.ndim == 2 and attn_mask is not None and attn_mask.ndim == 3:
        expected = (num_heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != expected:
            raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                 f"{tuple(attn_mask.shape)}")
    return query.ndim == 3


def _additive_mask(mask, name, dtype):
    """torch's _canonical_mask: a bool mask (True = do not attend) as 0 / -inf of `dtype`;
    a float mask unchanged."""
    if mask is None:
        return None
    mask = _as_tensor(mask)
    if mask.dtype == np.bool_:
        return Tensor.wrap(np.where(mask.data, -np.inf, 0.0).astype(dtype))
    if mask.dtype.kind != "f":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


def _in_projection(query, key, value, weight, bias, separate):
    """q, k, v projected by the packed (3E, E) weight, or by three separate weights."""
    weights = separate if weight is None else weight.chunk(3)
    biases = (None,) * 3 if bias is None else bias.chunk(3)
    return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """Multi-head attention on sequence-first input (L, N, E), or unbatched (L, E); returns
    (output, weights), weights None unless need_weights (averaged over heads if
    average_attn_weights). Masks as torch's: bool True means "do not attend"."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k and static_v are not "
                                  "supported")
    key_padding_mask = None if key_padding_mask is None else _as_tensor(key_padding_mask)
    attn_mask = None if attn_mask is None else _as_tensor(attn_mask)
    batched = _check_mha_shapes(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    key_padding_mask = _additive_mask(key_padding_mask, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        # The mask is only a hint here: attention applies causality itself.
        attn_mask = None
    else:
        attn_mask = _additive_mask(attn_mask, "attn_mask", query.dtype)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do not "
                                 f"match value's {tuple(value.shape[:2])}")
        q, k, v = _in_projection(query, key, value, None, in_proj_bias,
                                 (q_proj_weight, k_proj_weight, v_proj_weight))
    else:
        if key.shape != value.shape:
            raise AssertionError(f"key shape {tuple(key.shape)} does not match value shape "
                                 f"{tuple(value.shape)}")
        q, k, v = _in_projection(query, key, value, in_proj_weight, in_proj_bias, None)
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, "
                                   f"but should be {(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but "
                               f"should be {(bsz * num_heads, tgt_len, src_len)}.")
    if bias_k is not None and bias_v is not None:
        k = ops.cat([k, bias_k.expand((1, bsz, embed_dim))])
        v = ops.cat([v, bias_v.expand((1, bsz, embed_dim))])
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else pad(key_padding_mask, (0, 1))
    elif bias_k is not None or bias_v is not None:
        raise AssertionError("bias_k and bias_v must both be given or both be None")
    # (L, N, E) -> (N * heads, L, head_dim), torch's layout for the batched products.
    q = q.reshape((tgt_len, bsz * num_heads, head_dim)).transpose(0, 1)
    k = k.reshape((k.shape[0], bsz * num_heads, head_dim)).transpose(0, 1)
    v = v.reshape((v.shape[0], bsz * num_heads, head_dim)).transpose(0, 1)
    if add_zero_attn:
        zeros = Tensor.wrap(np.zeros((bsz * num_heads, 1, head_dim), q.dtype))
        k, v = ops.cat([k, zeros], dim=1), ops.cat([v, zeros], dim=1)
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else pad(key_padding_mask, (0, 1))
    src_len = k.shape[1]
    if key_padding_mask is not None:
        for axis, expected in enumerate((bsz, src_len)):
            if key_padding_mask.shape[axis] != expected:
                raise AssertionError(f"Expected key_padded_mask.shape[{axis}] to be {expected}, "
                                     f"but got {key_padding_mask.shape[axis]}")
        padding = (key_padding_mask.reshape((bsz, 1, 1, src_len))
                   .expand((bsz, num_heads, 1, src_len)).reshape((bsz * num_heads, 1, src_len)))
        attn_mask = padding if attn_mask is None else attn_mask + padding
    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = (q * (1.0 / float(np.sqrt(head_dim)))) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores + attn_mask
        # A plain softmax, as torch's weights path: fully masked rows come out NaN there too.
        weights = ops.softmax(scores, -1)
        if dropout_p > 0:
            weights = dropout(weights, p=dropout_p)
        out = weights @ v
    else:
        if attn_mask is not None:
            attn_mask = (attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1
                         else attn_mask.reshape((bsz, num_heads, -1, src_len)))
        q, k, v = (x.reshape((bsz, num_heads, x.shape[1], head_dim)) for x in (q, k, v))
        out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        weights = None
    # (N * heads, L, head_dim) -> (L, N, E)
    out = out.reshape((bsz, num_heads, tgt_len, head_dim)).permute((2, 0, 1, 3)) \
        .reshape((tgt_len, bsz, embed_dim))
    out = linear(out, out_proj_weight, out_proj_bias)
    if weights is not None:
        weights = weights.reshape((bsz, num_heads, tgt_len, src_len))
        if average_attn_weights:
            weights = weights.mean(1)
    if not batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights


# ----------------------------------------------------------------------------- norms
def _normalized_shape(normalized_shape):
    return ((normalized_shape,) if isinstance(normalized_shape, numbers.Integral)
            else tuple(normalized_shape))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """input / sqrt(mean(input^2) + eps) over the trailing `normalized_shape` dimensions,
    times weight; eps=None means the machine epsilon of input's dtype, as torch."""
    shape = _normalized_shape(normalized_shape)
    if not shape or tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(map(str, shape))}], but got input of size"
                           f"{list(input.shape)}")
    check_same_dtype(_MIXED_DTYPES, input, weight)
    if eps is None:
        eps = float(np.finfo(input.dtype).eps)
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    out = input / ((input * input).mean(dims, keepdim=True) + eps).sqrt()
    return out if weight is None else out * weight


def _vector_norm(input, p, dim):
    if p in (1, 2):
        return ops.norm(input, p=p, dim=dim, keepdim=True)
    if p == np.inf:
        return input.abs().amax(dim, keepdim=True)
    total = (input.abs() ** p).sum(dim, keepdim=True)
    # The root's derivative is infinite at 0; a zero vector's norm gets torch's zero gradient.
    zero = total == 0
    return ops.where(zero, 0.0, ops.where(zero, 1.0, total) ** (1.0 / p))


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input divided by its p-norm along `dim`, the norm clamped below at eps."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    if not -input.ndim <= dim < max(input.ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-input.ndim}, {input.ndim - 1}], but got {dim})")
    return input / ops.clamp(_vector_norm(input, p, dim), min=eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between x1 and x2 (broadcast together) along `dim`; each norm is
    clamped below at eps. As in torch, the clamp changes the value only: the gradient is the
    one of the unclamped norm."""
    shape = np.broadcast_shapes(x1.shape, x2.shape)
    unit = []
    for x in (x1, x2):
        x = x.expand(shape)
        norm = ops.norm(x, p=2, dim=dim, keepdim=True)
        unit.append(x / (norm + (ops.clamp(norm, min=eps) - norm).detach()))
    return (unit[0] * unit[1]).sum(dim)


# ----------------------------------------------------------------------------- more activations
__all__ += ["relu6", "hardtanh", "elu", "selu", "celu", "prelu", "mish", "softplus", "softsign",
            "hardswish", "hardsigmoid", "logsigmoid", "glu", "threshold"]

# SELU's constants (Klambauer et al., 2017), to the digits torch uses.
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


# torch's ScalarType names, as its dispatch errors print them.
_SCALAR_TYPE_NAMES = {"int8": "Char", "uint8": "Byte", "int16": "Short", "int32": "Int",
                      "int64": "Long", "bool": "Bool"}


def _check_floating(input, what):
    if input.dtype.kind != "f":
        name = _SCALAR_TYPE_NAMES.get(input.dtype.name, input.dtype.name)
        raise NotImplementedError(f'"{what}_cpu" not implemented for {name!r}')


def _pointwise(op, input, inplace, what, **params):
    _check_floating(input, what)
    return ops.inplace(op, input, **params) if inplace else op(input, **params)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _pointwise(ops.hardtanh, input, inplace, "hardtanh", min_val=min_val, max_val=max_val)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def elu(input, alpha=1.0, inplace=False):
    return _pointwise(ops.elu, input, inplace, "elu", alpha=alpha, scale=1.0, input_scale=1.0)


def selu(input, inplace=False):
    return _pointwise(ops.elu, input, inplace, "elu", alpha=_SELU_ALPHA, scale=_SELU_SCALE,
                      input_scale=1.0)


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _pointwise(ops.elu, input, inplace, "elu", alpha=alpha, scale=1.0,
                      input_scale=1.0 / alpha)


def softplus(input, beta=1.0, threshold=20.0):
    return _pointwise(ops.softplus, input, False, "softplus", beta=beta, threshold=threshold)


def logsigmoid(input):
    return _pointwise(ops.log_sigmoid, input, False, "log_sigmoid_forward")


def hardsigmoid(input, inplace=False):
    return _pointwise(ops.hardsigmoid, input, inplace, "hardsigmoid")


def hardswish(input, inplace=False):
    return _pointwise(ops.hardswish, input, inplace, "hardswish")


def threshold(input, threshold, value, inplace=False):
    return _pointwise(ops.threshold, input, inplace, "threshold", threshold=threshold,
                      value=value)


def softsign(input):
    return input / (input.abs() + 1)


def mish(input, inplace=False):
    # In place, the gradient reads a copy of the input, which the write does not overwrite.
    source = input.clone() if inplace else input
    out = source * ops.tanh(softplus(source))
    return input.copy_(out) if inplace else out


def prelu(input, weight):
    """x where x > 0, else weight * x; weight has one entry, or one per channel (dim 1)."""
    if weight.numel() != 1:
        channels = input.shape[1] if input.ndim >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {weight.numel()} and channel size = "
                               f"{channels}.")
        weight = weight.reshape((channels,) + (1,) * (input.ndim - 2))
    return ops.where(input > 0, input, weight * input)


def glu(input, dim=-1):
    """The first half of `dim` gated by the sigmoid of the second half."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension "
                           f"{dim % input.ndim} is size {size}")
    first, second = ops.chunk(input, 2, dim)
    return first * ops.sigmoid(second)


# ----------------------------------------------------------------------------- bilinear, bags
__all__ += ["bilinear", "embedding_bag"]


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = input1[..., :] A_o input2[..., :] + b_o with weight (out, in1, in2): one
    product with the weight's slices side by side, then a contraction with input2."""
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, got "
                           f"{weight.ndim} dimensions")
    out_features, in1, in2 = weight.shape
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and "
                           f"{input2.ndim}")
    for dim, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {dim}: "
                               f"got {a} and {b}")
    for name, size, expected in (("input1", input1.shape[-1], in1),
                                 ("input2", input2.shape[-1], in2),
                                 ("bias", None if bias is None else bias.shape[-1],
                                  out_features)):
        if size is not None and size != expected:
            raise RuntimeError(f"bilinear(): {name} size does not match weight size: got {size} "
                               f"but expected {expected}")
    batch = tuple(input1.shape[:-1])
    left = input1 @ weight.permute(1, 0, 2).reshape(in1, out_features * in2)
    out = (left.reshape(*batch, out_features, in2) * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias


def _bags(input, offsets, include_last_offset):
    """The flat indices and each bag's (start, stop) in them, from 2-D input (a bag per row)
    or 1-D input with offsets."""
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated "
                             f"is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets)}")
        bags, width = input.shape
        return input.data.reshape(-1), [(b * width, (b + 1) * width) for b in range(bags)]
    if input.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    offsets = np.asarray(offsets.data if isinstance(offsets, Tensor) else offsets)
    if offsets.ndim != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    length = input.shape[0]
    if len(offsets) and offsets[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           f"has to start from position 0. However, got {offsets[0]}")
    if len(offsets) and offsets[-1] > length:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {length} but "
                           f"got offsets[-1] of {offsets[-1]}")
    if (np.diff(offsets) < 0).any():
        raise RuntimeError(f"embedding_bag: offsets must not decrease, got {offsets.tolist()}")
    bounds = offsets.tolist() if include_last_offset else offsets.tolist() + [length]
    return input.data, list(zip(bounds[:-1], bounds[1:]))


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """The sum, mean or max of each bag of `weight`'s rows, without the rows in between:
    bags are the rows of 2-D input, or the runs of 1-D input that `offsets` start. Entries
    equal to padding_idx are left out of their bag (and of a mean's count); an empty bag
    gives zeros. per_sample_weights (mode 'sum') scale each looked-up row."""
    padding_idx = _embedding_options(weight.shape[0], padding_idx, scale_grad_by_freq, sparse,
                                     "embedding_bag")
    if scale_grad_by_freq:
        # torch 2.13's gradient here is not each row's divided by its count (a row seen once
        # can get half, another a third), so rather than differ silently, it is refused.
        raise NotImplementedError("embedding_bag: scale_grad_by_freq is not supported")
    input = _as_tensor(input)
    if input.dtype.kind not in "iu":
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {input.dtype} instead "
                           f"(while checking arguments for embedding_bag)")
    if per_sample_weights is not None and tuple(per_sample_weights.shape) != tuple(input.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}"
                         f") is not None, then it must have the same shape as the input "
                         f"({tuple(input.shape)})")
    indices, bags = _bags(input, offsets, include_last_offset)
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}'). Please open a feature request on GitHub.")
    bad = (indices < 0) | (indices >= weight.shape[0])
    if bad.any():
        where = int(np.argmax(bad))
        raise RuntimeError(f"Index {where} of input takes value {indices[where]} which is not in "
                           f"the valid range [0, {weight.shape[0]})")
    # Which looked-up rows each bag holds: padding entries are in none.
    member = np.zeros((len(bags), len(indices)), weight.dtype)
    for b, (start, stop) in enumerate(bags):
        member[b, start:stop] = 1
    if padding_idx is not None:
        member[:, indices == padding_idx] = 0
    rows = embedding(Tensor.wrap(indices), weight, None, max_norm, norm_type)
    if mode == "max":
        # Each bag's winner per column (its first maximum) is found on the values, then
        # gathered, so the gradient goes to it alone, as in torch.
        winners = np.zeros((len(bags), weight.shape[1]), np.int64)
        for b in range(len(bags)):
            (held,) = np.nonzero(member[b])
            if held.size:
                winners[b] = held[rows.data[held].argmax(0)]
        filled = Tensor.wrap(member.any(1, keepdims=True).astype(weight.dtype))
        return rows.gather(0, Tensor.wrap(winners)) * filled
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1)
    if mode == "mean":
        counts = member.sum(1, keepdims=True)
        member /= np.maximum(counts, 1)
    return Tensor.wrap(member) @ rows

