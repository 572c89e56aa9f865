"""Dropout."""
from . import _checks, functional as F
from .module import Module


class Dropout(Module):
    """Zeroes elements with probability p while training (scaling the rest by 1/(1-p)); the
    identity in eval mode. The mask comes from mpigrad's default generator."""
    _function = staticmethod(F.dropout)

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        _checks.probability("Dropout probability", p)
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return self._function(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) or (C, L) input with probability p while training."""
    _function = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) input with probability p while training."""
    _function = staticmethod(F.dropout2d)
