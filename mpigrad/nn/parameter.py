"""Parameter: a leaf tensor that a Module registers as learnable."""
import numpy as np

from ..tensor import Tensor, _init


class Parameter(Tensor):
    __slots__ = ()

    def __init__(self, data=None, requires_grad=True):
        """Shares storage with `data` (a Tensor or ndarray); an empty float tensor if None."""
        if data is None:
            array = np.empty(0, np.float32)
        elif isinstance(data, Tensor):
            array = data._array
        else:
            array = np.asarray(data)
        _init(self, array)
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class Buffer(Tensor):
    """Marks a tensor to be registered as a buffer when assigned to a Module attribute."""

    __slots__ = ()

    def __init__(self, data):
        _init(self, data._array if isinstance(data, Tensor) else np.asarray(data))
