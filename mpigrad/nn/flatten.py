"""Reshaping layers."""
from .. import ops
from ..ops.reduction import normalize_dims
from .module import Module


class Flatten(Module):
    """Flattens dimensions start_dim..end_dim into one; by default all but the batch."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return ops.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dimension `dim` into `unflattened_size`."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input):
        dim = normalize_dims(self.dim, input.ndim)[0]
        return input.reshape(input.shape[:dim] + self.unflattened_size + input.shape[dim + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
