"""Turning a list of samples into a batch."""
import collections.abc

import numpy as np

from ..creation import from_numpy
from ..ops import stack
from ..tensor import Tensor


def default_collate(batch):
    """Stack a list of samples into a batch, following the samples' structure.

    - Tensors are stacked along a new first dimension (`mpigrad.stack`).
    - numpy arrays and numpy scalars are stacked into a Tensor of their dtype.
    - Python ints become an int64 Tensor, floats a float64 Tensor and bools a
      bool Tensor, as in PyTorch.
    - Strings and bytes are left as a list.
    - Mappings are collated key by key, named tuples field by field, and other
      sequences position by position; a tuple comes back as a list.
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch)
    if isinstance(elem, (np.ndarray, np.generic)):
        # Object, string and structured arrays have no Tensor counterpart.
        if elem.dtype.kind in "OSUV":
            raise TypeError(
                f"default_collate: numpy arrays of dtype {elem.dtype} cannot become a Tensor; "
                "expected a numeric or bool dtype"
            )
        return from_numpy(np.stack(batch))
    if isinstance(elem, bool):
        return from_numpy(np.array(batch, dtype=np.bool_))
    if isinstance(elem, int):
        return from_numpy(np.array(batch, dtype=np.int64))
    if isinstance(elem, float):
        return from_numpy(np.array(batch, dtype=np.float64))
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        collated = {key: default_collate([sample[key] for sample in batch]) for key in elem}
        try:
            return type(elem)(collated)
        except TypeError:  # a mapping type whose constructor takes something else
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError(
                "default_collate: each sample in the batch should be a sequence of the same "
                f"length, got lengths {[len(sample) for sample in batch]}"
            )
        return [default_collate(list(field)) for field in zip(*batch)]
    raise TypeError(
        "default_collate: batch must contain Tensors, numpy arrays, numbers, strings, dicts "
        f"or lists; found {type(elem).__name__}"
    )
