"""One flat vector for many parameters and back, as torch.nn.utils.convert_parameters."""
from ... import ops
from ...tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one differentiable vector."""
    return ops.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of `vec` into `parameters`, in order.

    torch rebinds each `param.data` to a view of `vec`; here the values are copied into the
    parameters' own storage instead, because DistributedDataParallel and optimizers hold
    references to it."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    flat, start = vec._array.reshape(-1), 0
    for param in parameters:
        with param.writing() as array:
            array[...] = flat[start:start + array.size].reshape(array.shape)
        start += param._array.size
