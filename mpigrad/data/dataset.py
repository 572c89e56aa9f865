"""Map-style datasets: anything with `__getitem__` and `__len__`."""
import itertools
import math
import warnings

from ..creation import randperm
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


def random_split(dataset, lengths, generator=None):
    """Split `dataset` into non-overlapping `Subset`s of the given lengths, at random.

    As in PyTorch: `lengths` are sample counts summing to `len(dataset)`, or
    fractions summing to 1, which become `floor(fraction * len(dataset))` samples
    with the remainder handed out one at a time from the first split on. The order
    is one `randperm` drawn from `generator` (an `mpigrad.Generator`; mpigrad's
    default generator when None), so `mpigrad.manual_seed` makes it reproducible.
    """
    lengths = list(lengths)
    total = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for position, fraction in enumerate(lengths):
            if not 0 <= fraction <= 1:
                raise ValueError(f"Fraction at index {position} is not between 0 and 1")
        counts = [math.floor(total * fraction) for fraction in lengths]
        for extra in range(total - sum(counts)):
            counts[extra % len(counts)] += 1
        for position, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"Length of split at index {position} is 0. "
                              "This might result in an empty dataset.", stacklevel=2)
        lengths = counts
    if sum(lengths) != total:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset! "
                         f"(lengths {lengths} sum to {sum(lengths)}, the dataset has {total})")
    order = randperm(total, generator=generator).tolist()
    ends = list(itertools.accumulate(lengths))
    return [Subset(dataset, order[end - length:end]) for end, length in zip(ends, lengths)]
