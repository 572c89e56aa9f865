"""Datasets: map-style (`__getitem__`, usually `__len__`) and iterable (`__iter__`), and
the ways torch combines them (concatenated, chained, stacked, subsets)."""
import bisect
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

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """Base class for datasets that are a stream of samples (`__iter__`), not indexable.

    A DataLoader reads it in order, without a sampler. With `num_workers > 0`
    every worker iterates its own copy of the dataset, so a dataset that should
    not yield its samples `num_workers` times splits its stream in `__iter__`
    (or in `worker_init_fn`) by `get_worker_info().id` and `.num_workers`.
    `len()` works only if the subclass defines `__len__`.
    """

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other):
        return ChainDataset([self, other])


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
    """The samples of `dataset` at positions `indices`, in that order.

    DataLoader reads a batch of it through `__getitems__` (itself through the
    dataset's `__getitems__` if it has one), so a subclass that overrides
    `__getitem__` must override `__getitems__` too, as torch requires.
    """

    def __init__(self, dataset, indices):
        kind = type(self)
        if kind.__getitem__ is not Subset.__getitem__ and kind.__getitems__ is Subset.__getitems__:
            raise NotImplementedError(
                f"{kind.__name__} overrides __getitem__ but not __getitems__, which DataLoader "
                "reads batches with; override it too, e.g.\n\n"
                "def __getitems__(self, indices):\n"
                "    return [self.__getitem__(idx) for idx in indices]")
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices):
        return _read_batch(self.dataset, [self.indices[i] for i in indices])

    def __len__(self):
        return len(self.indices)


def _read_batch(dataset, indices):
    """The samples of `dataset` at `indices`, through its `__getitems__` if it has one."""
    read_batch = getattr(dataset, "__getitems__", None)
    if not callable(read_batch):
        return [dataset[i] for i in indices]
    samples = read_batch(indices)
    if len(samples) != len(indices):
        raise ValueError(f"Nested dataset's output size mismatch. Expected {len(indices)}, "
                         f"got {len(samples)}")
    return samples


class ConcatDataset(Dataset):
    """Map-style datasets one after another: index `i` falls in the dataset whose
    running total (`cumulative_sizes`) first exceeds it."""

    @staticmethod
    def cumsum(sequence):
        return list(itertools.accumulate(len(dataset) for dataset in sequence))

    def __init__(self, datasets):
        self.datasets = list(datasets)
        # AssertionError, as torch raises, so code that catches torch's error catches this one.
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(dataset, IterableDataset) for dataset in self.datasets):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        if which == len(self.datasets):
            raise IndexError(f"index {index} is out of range for a ConcatDataset of "
                             f"{len(self)} samples")
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another, chained as they are read."""

    def __init__(self, datasets):
        self.datasets = datasets

    def _members(self):
        for dataset in self.datasets:
            if not isinstance(dataset, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield dataset

    def __iter__(self):
        for dataset in self._members():
            yield from dataset

    def __len__(self):
        return sum(len(dataset) for dataset in self._members())


class StackDataset(Dataset):
    """Datasets of equal length side by side: sample `i` is the tuple of each one's
    sample `i` (datasets given positionally) or the dict of them (given by keyword)."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("StackDataset takes datasets either positionally (tuple samples) "
                             "or by keyword (dict samples), but both were given")
        if not (args or kwargs):
            raise ValueError("At least one dataset should be passed")
        members = args or list(kwargs.values())
        self._length = len(members[0])
        if any(len(dataset) != self._length for dataset in members):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args or kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {key: dataset[index] for key, dataset in self.datasets.items()}
        return tuple(dataset[index] for dataset in self.datasets)

    def __getitems__(self, indices):
        if isinstance(self.datasets, dict):
            columns = {key: _read_batch(dataset, indices) for key, dataset in self.datasets.items()}
            return [dict(zip(columns, row)) for row in zip(*columns.values())]
        return list(zip(*(_read_batch(dataset, indices) for dataset in self.datasets)))

    def __len__(self):
        return self._length


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
