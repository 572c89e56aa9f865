"""Fully connected layers."""
import math

from .. import creation
from . import functional as F, init
from ._checks import check_device, positive_int
from .module import Module
from .parameter import Parameter


class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments, as torch's does."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x W^T + b, with weight (out_features, in_features) and torch's default init."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        check_device(device, "Linear")
        self.in_features = positive_int("in_features", in_features, "Linear")
        self.out_features = positive_int("out_features", out_features, "Linear")
        self.weight = Parameter(creation.empty(self.out_features, self.in_features, dtype=dtype))
        self.register_parameter(
            "bias", Parameter(creation.empty(self.out_features, dtype=dtype)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        # kaiming_uniform with a=sqrt(5) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)), torch's
        # long-standing default; the bias uses the same bound.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class NonDynamicallyQuantizableLinear(Linear):
    """torch's name for MultiheadAttention's out_proj; a plain Linear here (no quantisation)."""


class Bilinear(Module):
    """y_o = x1^T A_o x2 + b_o, with weight (out_features, in1_features, in2_features); weight
    and bias start U(-1/sqrt(in1_features), 1/sqrt(in1_features)), as torch's."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        check_device(device, "Bilinear")
        self.in1_features = positive_int("in1_features", in1_features, "Bilinear")
        self.in2_features = positive_int("in2_features", in2_features, "Bilinear")
        self.out_features = positive_int("out_features", out_features, "Bilinear")
        self.weight = Parameter(creation.empty(out_features, in1_features, in2_features,
                                               dtype=dtype))
        self.register_parameter(
            "bias", Parameter(creation.empty(out_features, dtype=dtype)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
