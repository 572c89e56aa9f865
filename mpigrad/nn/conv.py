"""Convolution layers."""
import math

from .. import creation
from . import functional as F, init
from ._checks import check_device, positive_int
from .module import Module
from .parameter import Parameter


class Conv2d(Module):
    """2-D convolution over (N, C, H, W) or (C, H, W) input; weight is (out_channels,
    in_channels // groups, kh, kw). padding is an int, a pair, 'valid' or 'same'."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        check_device(device, "Conv2d")
        self.in_channels = positive_int("in_channels", in_channels, "Conv2d")
        self.out_channels = positive_int("out_channels", out_channels, "Conv2d")
        self.groups = positive_int("groups", groups, "Conv2d")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must both be divisible by groups ({groups})")
        self.kernel_size = F._pair(kernel_size, "kernel_size", 1)
        self.stride = F._pair(stride, "stride", 1)
        self.dilation = F._pair(dilation, "dilation", 1)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"Conv2d: padding must be an int, a pair, 'valid' or 'same', "
                                 f"got {padding!r}")
            if padding == "same" and self.stride != (1, 1):
                raise ValueError("Conv2d: padding='same' is not supported for strided "
                                 f"convolutions (stride={self.stride})")
            self.padding = padding
        else:
            self.padding = F._pair(padding, "padding", 0)
        if padding_mode != "zeros":
            raise NotImplementedError(f"Conv2d: only padding_mode='zeros' is supported, got "
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
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0, 0):
            text += f", padding={self.padding!r}"
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text
