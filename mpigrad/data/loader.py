"""DataLoader: batches of a dataset in the order a sampler gives."""
import numpy as np

from ..creation import from_numpy

from .collate import default_collate
from .dataset import Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler


def _getitem(dataset):
    # Compared by identity: a subclass that overrides __getitem__ may change what a
    # sample is, so only the inherited method vouches for plain rows of arrays.
    return getattr(type(dataset), "__getitem__", None)


class DataLoader:
    """Iterate over `dataset` in batches.

    Args:
        dataset: a map-style dataset (`__getitem__` and `__len__`).
        batch_size: samples per batch.
        shuffle: visit the samples in a fresh random order each pass
            (a `RandomSampler` seeded from `generator`).
        sampler: the order of the indices, e.g. a `DistributedSampler`;
            excludes `shuffle`.
        batch_sampler: yields whole lists of indices; excludes
            `batch_size`, `shuffle`, `sampler` and `drop_last`.
        drop_last: drop the last batch if it is smaller than `batch_size`.
        collate_fn: turns a list of samples into a batch
            (`default_collate` if not given).
        generator: an int seed or `mpigrad.Generator` for `shuffle`.

    With the default collation, a `TensorDataset` (or a `Subset` of one)
    whose tensors do not require grad is batched by indexing each tensor's
    array once per batch rather than sample by sample; the batch is the same.
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        shuffle=False,
        sampler=None,
        batch_sampler=None,
        drop_last=False,
        collate_fn=None,
        generator=None,
    ):
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
        else:
            if sampler is not None and shuffle:
                raise ValueError(
                    "sampler option is mutually exclusive with shuffle: the sampler decides the "
                    "order (use DistributedSampler(shuffle=True) or RandomSampler instead)"
                )
            if sampler is None:
                sampler = (
                    RandomSampler(dataset, generator=generator)
                    if shuffle
                    else SequentialSampler(dataset)
                )
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.generator = generator

    def __iter__(self):
        gather = self._array_gather()
        for indices in self.batch_sampler:
            if gather is not None:
                yield gather(indices)
            else:
                yield self.collate_fn([self.dataset[i] for i in indices])

    def __len__(self):
        return len(self.batch_sampler)

    def _array_gather(self):
        """A function from batch indices to the batch, reading the dataset's arrays
        directly, or None when the dataset is not one whose samples are plain rows
        of arrays (or a custom collate_fn must see the samples)."""
        if self.collate_fn is not default_collate:
            return None
        dataset, positions = self.dataset, None
        while _getitem(dataset) is Subset.__getitem__:
            subset = np.asarray(dataset.indices, dtype=np.intp)
            positions = subset if positions is None else subset[positions]
            dataset = dataset.dataset
        if _getitem(dataset) is not TensorDataset.__getitem__ or any(
            t.requires_grad for t in dataset.tensors
        ):
            return None
        arrays = [t.data for t in dataset.tensors]

        def gather(indices):
            rows = np.asarray(indices, dtype=np.intp)
            if positions is not None:
                rows = positions[rows]
            # A tuple sample collates to a list, so the batch is a list here too.
            return [from_numpy(a[rows]) for a in arrays]

        return gather
