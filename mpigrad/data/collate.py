"""Turning samples into batches: `default_collate` (a list of samples into one batch) and
`default_convert` (one sample's numpy parts into Tensors, when auto-batching is off)."""
import collections.abc
import copy

import numpy as np

from ..creation import as_tensor, from_numpy
from ..dtypes import is_floating_point
from ..ops import stack
from ..tensor import Tensor


def _has_tensor_dtype(array):
    # Object, string, bytes, void (structured) arrays have no Tensor counterpart; bfloat16
    # has numpy kind "V" too.
    return array.dtype.kind not in "OSUV" or is_floating_point(array.dtype)


def _rebuild(elem, values):
    """`values` (one per element of the container `elem`) in a container like `elem`, as
    torch rebuilds one: a copy updated in place when `elem` is mutable (a subclass may
    carry more state than its items), else the type called on them, else a plain
    list or dict when the type will not take them."""
    try:
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(values)
            return clone
        if isinstance(elem, collections.abc.Mapping):
            return type(elem)(values)
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for position, value in enumerate(values):
                clone[position] = value
            return clone
        return type(elem)(values)
    except TypeError:
        return dict(values) if isinstance(elem, collections.abc.Mapping) else list(values)


def _is_sequence(elem):
    return isinstance(elem, collections.abc.Sequence) and not isinstance(elem, (str, bytes))


def default_collate(batch):
    """Stack a list of samples into a batch, following the samples' structure, as torch's.

    - Tensors are stacked along a new first dimension (`mpigrad.stack`).
    - numpy arrays and numpy scalars are stacked into a Tensor of their dtype.
    - Python ints become an int64 Tensor, floats a float64 Tensor and bools a
      bool Tensor.
    - Strings (numpy's too) and bytes are left as they are: the list given, or a
      tuple of one field of tuple samples.
    - Mappings are collated key by key and named tuples field by field, each
      keeping its type; other sequences position by position, a tuple coming
      back as a list and other sequence types kept where they can be rebuilt.
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch)
    if isinstance(elem, np.ndarray):
        if not _has_tensor_dtype(elem):
            raise TypeError("default_collate: batch must contain tensors, numpy arrays, "
                            f"numbers, dicts or lists; found {elem.dtype}")
        return stack([from_numpy(sample) for sample in batch])
    if isinstance(elem, (np.bool_, np.number)):
        return from_numpy(np.array(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, float):
        return from_numpy(np.array(batch, dtype=np.float64))
    if isinstance(elem, int):  # bool included: torch.tensor([True, ...]) is a bool tensor
        return from_numpy(np.array(batch))
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild(elem, {key: default_collate([sample[key] for sample in batch])
                               for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(field) for field in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(field) for field in zip(*batch)]
        return fields if isinstance(elem, tuple) else _rebuild(elem, fields)
    raise TypeError("default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem)}")


def default_convert(data):
    """One sample with its numpy arrays and scalars made Tensors (string and object
    arrays, and everything else, left as they are), through mappings, named tuples
    and sequences, as torch's: what DataLoader applies to each sample when
    `batch_size=None` turns batching off."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return as_tensor(data) if _has_tensor_dtype(data) else data
    if isinstance(data, (np.bool_, np.number)):
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(field) for field in data))
    if isinstance(data, tuple):
        return [default_convert(field) for field in data]
    if _is_sequence(data):
        return _rebuild(data, [default_convert(field) for field in data])
    return data
