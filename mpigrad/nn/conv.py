"""Convolution layers."""
import math

from .. import creation
from . import _checks, functional as F, init
from ._checks import check_device, positive_int
from .module import Module
from .parameter import Parameter

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """What the convolutions share: argument checks, the parameters and torch's init.
    Subclasses set `_dims` (spatial dimensions) and `_convolve` (the functional form);
    transposed ones `_transposed`, which swaps the weight's channel axes as torch does."""

    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        check_device(device, name)
        self.in_channels = positive_int("in_channels", in_channels, name)
        self.out_channels = positive_int("out_channels", out_channels, name)
        self.groups = positive_int("groups", groups, name)
        for what, channels in (("in_channels", in_channels), ("out_channels", out_channels)):
            if channels % groups:
                raise ValueError(f"{what} must be divisible by groups ({groups}), got "
                                 f"{channels}")
        dims = self._dims
        self.kernel_size = _checks.ntuple("kernel_size", kernel_size, dims, 1)
        self.stride = _checks.ntuple("stride", stride, dims, 1)
        self.dilation = _checks.ntuple("dilation", dilation, dims, 1)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"{name}: padding must be an int, a tuple, 'valid' or 'same', "
                                 f"got {padding!r}")
            if padding == "same" and self.stride != (1,) * dims:
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _checks.ntuple("padding", padding, dims, 0)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.padding_mode = padding_mode
        channels = (in_channels, out_channels // groups) if self._transposed \
            else (out_channels, in_channels // groups)
        self.weight = Parameter(creation.empty(*channels, *self.kernel_size, dtype=dtype))
        self.register_parameter(
            "bias", Parameter(creation.empty(self.out_channels, dtype=dtype)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        # torch's default, as for Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            init.uniform_(self.bias, -bound, bound)

    def _mode_padding(self):
        """F.pad's widths for a padding_mode other than zeros: (before, after) per spatial
        axis, last axis first; 'same' puts an odd total's extra at the end, as torch."""
        if self.padding == "valid":
            sides = [(0, 0)] * self._dims
        elif self.padding == "same":
            totals = [d * (k - 1) for k, d in zip(self.kernel_size, self.dilation)]
            sides = [(t // 2, t - t // 2) for t in totals]
        else:
            sides = [(p, p) for p in self.padding]
        return tuple(w for side in reversed(sides) for w in side)

    def forward(self, input):
        if self.padding_mode == "zeros":
            padding = self.padding
        else:
            input = F.pad(input, self._mode_padding(), mode=self.padding_mode)
            padding = 0
        return type(self)._convolve(input, self.weight, self.bias, self.stride, padding,
                                    self.dilation, self.groups)

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * self._dims:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            text += f", dilation={self.dilation}"
        if getattr(self, "output_padding", (0,) * self._dims) != (0,) * self._dims:
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class Conv1d(_ConvNd):
    """1-D convolution over (N, C, L) or (C, L) input; weight is (out_channels,
    in_channels // groups, k). padding is an int, a 1-tuple, 'valid' or 'same'."""
    _dims = 1
    _convolve = F.conv1d


class Conv2d(_ConvNd):
    """2-D convolution over (N, C, H, W) or (C, H, W) input; weight is (out_channels,
    in_channels // groups, kh, kw). padding is an int, a pair, 'valid' or 'same'."""
    _dims = 2
    _convolve = F.conv2d


class _ConvTransposeNd(_ConvNd):
    """Transposed convolutions: weight (in_channels, out_channels // groups, *kernel_size);
    forward takes an optional `output_size` that picks the output_padding, as torch's."""

    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        name = type(self).__name__
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {name}')
        if isinstance(padding, str):
            raise TypeError(f"{name}: padding must be an int or a tuple of ints, got "
                            f"{padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)
        self.output_padding = _checks.ntuple("output_padding", output_padding, self._dims, 0)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        dims = self._dims
        output_size = tuple(output_size)
        batched = input.ndim == dims + 2
        leading = 2 if batched else 1
        if len(output_size) == leading + dims:
            output_size = output_size[leading:]
        if len(output_size) != dims:
            raise ValueError(f"ConvTranspose{dims}D: for {input.ndim}D input, output_size must "
                             f"have {dims} or {leading + dims} elements (got "
                             f"{len(output_size)})")
        spatial = tuple(input.shape[input.ndim - dims:])
        smallest = [(n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in
                    zip(spatial, self.stride, self.padding, self.dilation, self.kernel_size)]
        largest = [m + s - 1 for m, s in zip(smallest, self.stride)]
        if any(not lo <= size <= hi for size, lo, hi in zip(output_size, smallest, largest)):
            raise ValueError(f"requested an output size of {output_size}, but valid sizes range "
                             f"from {smallest} to {largest} (for an input of {spatial})")
        return tuple(size - lo for size, lo in zip(output_size, smallest))

    def forward(self, input, output_size=None):
        return type(self)._convolve(input, self.weight, self.bias, self.stride, self.padding,
                                    self._output_padding(input, output_size), self.groups,
                                    self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution over (N, C, L) or (C, L) input."""
    _dims = 1
    _convolve = F.conv_transpose1d


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution over (N, C, H, W) or (C, H, W) input."""
    _dims = 2
    _convolve = F.conv_transpose2d
