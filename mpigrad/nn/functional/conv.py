"""Convolutions and their building blocks: im2col (unfold), col2im (fold), conv1d/2d and the
transposed convolutions, over the kernels of ops/conv.py."""
import numbers

from ... import ops
from ...dtypes import check_same_dtype
from ...ops import conv as conv_ops
from ...ops.conv import kernel_extent, sliding_output_size
from .. import _checks


def _batched_image(input, what):
    """`input` as (N, C, H, W), and whether it came in unbatched as (C, H, W)."""
    _checks.input_rank(what, input, (3, 4))
    return (input.unsqueeze(0), True) if input.ndim == 3 else (input, False)


def _same_padding(kernel_size, dilation, stride):
    """torch's padding='same': (before, after) per axis; odd totals put the extra at the end."""
    if stride != (1, 1):
        raise RuntimeError(f"padding='same' is not supported for strided convolutions "
                           f"(stride={stride})")
    totals = [d * (k - 1) for k, d in zip(kernel_size, dilation)]
    return [(t // 2, t - t // 2) for t in totals]


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: every sliding block of `input` (N, C, H, W) as a column, giving
    (N, C * kh * kw, L) with L the number of block positions."""
    kernel_size = _checks.pair("kernel_size", kernel_size, 1)
    dilation = _checks.pair("dilation", dilation, 1)
    padding, stride = _checks.pair("padding", padding, 0), _checks.pair("stride", stride, 1)
    if input.ndim != 4:
        raise RuntimeError(f"unfold: expected a 4-D (N, C, H, W) input, got shape "
                           f"{tuple(input.shape)}")
    _checks.kernel_fits("unfold", kernel_extent(kernel_size, dilation), input.shape[2:],
                        padding)
    return conv_ops.unfold(input, kernel_size=kernel_size, dilation=dilation, padding=padding,
                           stride=stride)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, the adjoint of `unfold`: sums the columns (N, C * kh * kw, L) back into an
    (N, C, H, W) image; overlapping blocks add up."""
    output_size = _checks.pair("output_size", output_size, 1)
    kernel_size = _checks.pair("kernel_size", kernel_size, 1)
    dilation = _checks.pair("dilation", dilation, 1)
    padding, stride = _checks.pair("padding", padding, 0), _checks.pair("stride", stride, 1)
    taps = kernel_size[0] * kernel_size[1]
    _checks.kernel_fits("fold", kernel_extent(kernel_size, dilation), output_size, padding)
    oh, ow = sliding_output_size(output_size, kernel_size, dilation, padding, stride)
    if input.ndim != 3 or input.shape[1] % taps or input.shape[2] != oh * ow:
        raise RuntimeError(f"fold: expected an input of shape (N, C * {taps}, {oh * ow}) for "
                           f"kernel {kernel_size} and output size {output_size}, got shape "
                           f"{tuple(input.shape)}")
    return conv_ops.fold(input, output_size=output_size, kernel_size=kernel_size,
                         dilation=dilation, padding=padding, stride=stride)


def _check_groups(groups, weight):
    """groups must be a positive integer dividing the weight's first dimension (out_channels
    of a convolution, in_channels of a transposed one)."""
    if not isinstance(groups, numbers.Integral) or groups < 1 or weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size {list(weight.shape)} instead")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation: im2col and a GEMM per chunk of samples (grouped: per sample, one
    batched matrix product over the groups).

    weight is (out_channels, in_channels // groups, kh, kw); padding is an int, a pair,
    'valid' or 'same'.
    """
    x, unbatched = _batched_image(input, "conv2d")
    if weight.ndim != 4:
        raise RuntimeError(f"conv2d: expected a 4-D weight (out_channels, in_channels / groups, "
                           f"kh, kw), got size {list(weight.shape)}")
    out_channels, group_channels, kh, kw = weight.shape
    _check_groups(groups, weight)
    if x.shape[1] != group_channels * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected "
                           f"input{list(x.shape)} to have {group_channels * groups} channels, but "
                           f"got {x.shape[1]} channels instead")
    stride, dilation = _checks.pair("stride", stride, 1), _checks.pair("dilation", dilation, 1)
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        sides = _same_padding((kh, kw), dilation, stride)
        if any(before != after for before, after in sides):
            (top, bottom), (left, right) = sides
            x = ops.pad(x, (0, right - left, 0, bottom - top))
        padding = (sides[0][0], sides[1][0])
    else:
        padding = _checks.pair("padding", padding, 0)
    check_same_dtype("expected scalar type {} but found {}", x, weight)
    check_same_dtype("Input type ({}) and bias type ({}) should be the same", x, bias)
    _checks.kernel_fits("conv2d", kernel_extent((kh, kw), dilation), x.shape[2:], padding)
    out = conv_ops.conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                          groups=groups)
    # torch's one node for every convolution; mpigrad's last op of its composition.
    out = ops.named(out, "ConvolutionBackward0", x)
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation over (N, C, L) or (C, L) input: conv2d on a height-1 image, so it
    shares conv2d's kernels and their gradient and tangent rules.

    weight is (out_channels, in_channels // groups, k); padding is an int, a 1-tuple, 'valid'
    or 'same'.
    """
    _checks.input_rank("conv1d", input, (2, 3))
    if weight.ndim != 3:
        raise RuntimeError(f"conv1d: expected a 3-D weight (out_channels, in_channels / groups, "
                           f"k), got size {list(weight.shape)}")
    if not isinstance(padding, str):
        padding = (0,) + _checks.single("padding", padding, 0)
    out = conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                 (1,) + _checks.single("stride", stride, 1), padding,
                 (1,) + _checks.single("dilation", dilation, 1), groups)
    return ops.named(out.squeeze(-2), "ConvolutionBackward0", input) if input.ndim == 3 \
        else out.squeeze(-2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """The adjoint of conv2d in its input (a "deconvolution"): each input pixel scatters its
    kernel-weighted copy onto a stride-spaced output grid, so the output is
    (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 per axis.

    weight is (in_channels, out_channels // groups, kh, kw), torch's layout, which is the
    layout of the conv2d whose input gradient this is.
    """
    x, unbatched = _batched_image(input, "conv_transpose2d")
    if weight.ndim != 4:
        raise RuntimeError(f"conv_transpose2d: expected a 4-D weight (in_channels, "
                           f"out_channels / groups, kh, kw), got size {list(weight.shape)}")
    in_channels, group_channels, kh, kw = weight.shape
    _check_groups(groups, weight)
    if x.shape[1] != in_channels:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{list(x.shape)} to have {in_channels} channels, but got "
                           f"{x.shape[1]} channels instead")
    stride, dilation = _checks.pair("stride", stride, 1), _checks.pair("dilation", dilation, 1)
    padding = _checks.pair("padding", padding, 0)
    output_padding = _checks.pair("output_padding", output_padding, 0)
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
    out = ops.named(out, "ConvolutionBackward0", x)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """conv_transpose2d over (N, C, L) or (C, L) input, on a height-1 image; weight is
    (in_channels, out_channels // groups, k)."""
    _checks.input_rank("conv_transpose1d", input, (2, 3))
    if weight.ndim != 3:
        raise RuntimeError(f"conv_transpose1d: expected a 3-D weight (in_channels, "
                           f"out_channels / groups, k), got size {list(weight.shape)}")
    out = conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                           (1,) + _checks.single("stride", stride, 1),
                           (0,) + _checks.single("padding", padding, 0),
                           (0,) + _checks.single("output_padding", output_padding, 0), groups,
                           (1,) + _checks.single("dilation", dilation, 1))
    return ops.named(out.squeeze(-2), "ConvolutionBackward0", input) if input.ndim == 3 \
        else out.squeeze(-2)
