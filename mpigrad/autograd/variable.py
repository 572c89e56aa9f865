"""`Variable`, torch's deprecated name from before tensors tracked gradients themselves.

As in torch, every Tensor is an instance of it, and calling it returns a new leaf that shares
the tensor's storage and has the requested `requires_grad` (no history: the argument's graph is
not followed). `volatile` is accepted with torch's warning that it does nothing.
"""
import warnings

from ..tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    def __new__(cls, data, requires_grad=False, volatile=False):
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        if volatile:
            warnings.warn("volatile was removed and now has no effect. Use `with "
                          "torch.no_grad():` instead.", stacklevel=2)
        leaf = data.detach()
        return leaf.requires_grad_(requires_grad) if requires_grad else leaf
