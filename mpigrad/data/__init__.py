"""Datasets, samplers and loaders, with PyTorch's `torch.utils.data` names.

This is the canonical package; `mpigrad.utils.data` is torch's path to the same objects.
The loader framework (Dataset, samplers, DataLoader and its workers, collation,
partitioning, DistributedSampler) is here; concrete datasets are in `datasets/`.

Reproducible and resumable order
--------------------------------
A shuffled order (`RandomSampler`, `DataLoader(shuffle=True)`,
`DistributedSampler`) is a pure function of `(seed, epoch)`: the same on
every rank and in every run. To resume a job checkpointed after `step`
batches of `epoch`, save those two numbers and, on restart, build the
loader with the same seed and skip what was already seen::

    sampler = DistributedSampler(dataset, seed=seed)   # or RandomSampler(dataset, generator=seed)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    for e in range(epoch, epochs):
        sampler.set_epoch(e)
        batches = iter(loader)
        if e == epoch:
            batches = itertools.islice(batches, step, None)
        for batch in batches:
            ...

The skipped batches are still read; for a `TensorDataset` (or a subset of
one) that is a single indexing call per batch. `RandomSampler` also moves
to the next epoch by itself after every pass.
"""
from .collate import default_collate, default_convert
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset,
                      TensorDataset, random_split)
from .datasets import MNIST, SyntheticImages, load_digits, read_idx, write_idx
from .distributed import DistributedSampler
from .loader import DataLoader
from .partition import DataPartitioner, Partition
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)
from .worker import WorkerInfo, get_worker_info

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "DataPartitioner",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "MNIST",
    "Partition",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "StackDataset",
    "Subset",
    "SubsetRandomSampler",
    "SyntheticImages",
    "TensorDataset",
    "WeightedRandomSampler",
    "WorkerInfo",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "load_digits",
    "random_split",
    "read_idx",
    "write_idx",
]
