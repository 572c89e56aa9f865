"""Pooling layers. Arguments are checked when the layer is built, not at the first batch."""
from . import _checks, functional as F
from .module import Module


class MaxPool2d(Module):
    """Maximum over each kernel_size window; stride defaults to kernel_size."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        kernel = _checks.pair("kernel_size", kernel_size, 1)
        if stride is not None:
            _checks.pair("stride", stride, 1)
        _checks.pair("dilation", dilation, 1)
        _checks.pool_padding("MaxPool2d", _checks.pair("padding", padding, 0), kernel)
        # Kept as given, as torch keeps them (`MaxPool2d(3).kernel_size == 3`, and its repr).
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over each kernel_size window; stride defaults to kernel_size."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        kernel = _checks.pair("kernel_size", kernel_size, 1)
        if stride is not None:
            _checks.pair("stride", stride, 1)
        _checks.pool_padding("AvgPool2d", _checks.pair("padding", padding, 0), kernel)
        self.kernel_size = kernel_size  # as given, as MaxPool2d
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        _checks.divisor_override("AvgPool2d", divisor_override)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"



class MaxPool1d(Module):
    """Maximum over each kernel_size window of the last dimension; stride defaults to
    kernel_size."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        # Kept as given (torch's repr shows them so), checked as 1-tuples.
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        checked = {name: _checks.single(name, getattr(self, name), minimum) for name, minimum in
                   (("kernel_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1))}
        _checks.pool_padding("MaxPool1d", checked["padding"], checked["kernel_size"])
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(Module):
    """Mean over each kernel_size window of the last dimension; stride defaults to
    kernel_size."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size = _checks.single("kernel_size", kernel_size, 1)
        self.stride = self.kernel_size if stride is None else _checks.single("stride", stride, 1)
        self.padding = _checks.single("padding", padding, 0)
        _checks.pool_padding("AvgPool1d", self.padding, self.kernel_size)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptiveMaxPool(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class _AdaptiveAvgPool(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)
