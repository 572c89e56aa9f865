"""Convolution layers."""
import math

from .. import creation
from . import functional as F, init
from ._checks import check_device, positive_int
from .module import Module
from .parameter import Parameter


class _ConvNd(Module):
    """What Conv1d and Conv2d share: argument checks, the parameters and torch's init.
    Subclasses set `_dims` (spatial dimensions) and `_convolve` (the functional form)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        check_device(device, name)
        self.in_channels = positive_int("in_channels", in_channels, name)
        self.out_channels = positive_int("out_channels", out_channels, name)
        self.groups = positive_int("groups", groups, name)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must both be divisible by groups ({groups})")
        dims = self._dims
        self.kernel_size = F._ntuple(kernel_size, "kernel_size", 1, dims)
        self.stride = F._ntuple(stride, "stride", 1, dims)
        self.dilation = F._ntuple(dilation, "dilation", 1, dims)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"{name}: padding must be an int, a tuple, 'valid' or 'same', "
                                 f"got {padding!r}")
            if padding == "same" and self.stride != (1,) * dims:
                raise ValueError(f"{name}: padding='same' is not supported for strided "
                                 f"convolutions (stride={self.stride})")
            self.padding = padding
        else:
            self.padding = F._ntuple(padding, "padding", 0, dims)
        if padding_mode != "zeros":
            raise NotImplementedError(f"{name}: only padding_mode='zeros' is supported, got "
                                      f"{padding_mode!r}")
        self.padding_mode = padding_mode
        self.weight = Parameter(creation.empty(self.out_channels, self.in_channels // self.groups,
                                               *self.kernel_size, dtype=dtype))
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

    def forward(self, input):
        return type(self)._convolve(input, self.weight, self.bias, self.stride, self.padding,
                                    self.dilation, self.groups)

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * self._dims:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
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
