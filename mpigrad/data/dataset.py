"""Map-style datasets: anything with `__getitem__` and `__len__`."""
from ..tensor import Tensor


class Dataset:
    """Base class for map-style datasets.

    A subclass maps an integer index to a sample in `__getitem__` and
    reports its size in `__len__`, which the samplers need.
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")


class TensorDataset(Dataset):
    """Samples are `tuple(t[i] for t in tensors)`; all tensors share their first dimension.

    `DataLoader` recognises this class (and subclasses that keep its
    `__getitem__`) and gathers a whole batch with one indexing call per
    tensor instead of collating sample by sample. Datasets backed by arrays
    gain that fast path by subclassing it.
    """

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        for position, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"TensorDataset takes mpigrad Tensors, but argument {position} is a "
                    f"{type(t).__name__}; wrap numpy arrays with mpigrad.from_numpy"
                )
            if t.ndim == 0:
                raise ValueError(
                    "TensorDataset needs a first (sample) dimension, "
                    f"but argument {position} is 0-d"
                )
        lengths = [len(t) for t in tensors]
        if len(set(lengths)) != 1:
            raise ValueError(f"Size mismatch between tensors: first dimensions are {lengths}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return len(self.tensors[0])


class Subset(Dataset):
    """The samples of `dataset` at positions `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)
