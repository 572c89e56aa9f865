"""DataLoader: batches of a dataset in the order a sampler gives."""
import warnings

import numpy as np

from ..creation import from_numpy, randint
from ..random import Generator

from .collate import default_collate
from ._checks import check_int
from .dataset import Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler, epoch_rng, seed_from
from .worker import MultiProcessIterator, _WorkerPool, start_method


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
        generator: an int seed or `mpigrad.Generator` for `shuffle` and the
            workers' base seed.
        num_workers: load batches in this many worker processes (0: in this
            process). See `mpigrad.data.worker` for their seeding, start method
            (torch's default, fork on Linux, until MPI is initialised; then spawn)
            and shutdown.
        pin_memory: accepted; with no accelerator it does nothing and warns, as
            PyTorch on a CPU-only machine.
        timeout: seconds to wait for a batch from the workers (0: no limit).
        worker_init_fn: called in each worker with its id, after seeding.
        multiprocessing_context: a start method name or a context (`"fork"` only
            while MPI is not initialised).
        prefetch_factor: batches queued per worker (default 2 with workers).
        persistent_workers: keep the workers between passes.
        in_order: accepted; batches always come in the sampler's order.

    Every pass draws a base seed, as PyTorch does: from `generator`, or from
    mpigrad's default generator when it is None, when `iter(loader)` is called
    (a shuffling sampler then draws its own seed at the first batch). Worker
    `i` is seeded with `base_seed + i`.

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
        num_workers=0,
        collate_fn=None,
        pin_memory=False,
        drop_last=False,
        timeout=0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor=None,
        persistent_workers=False,
        pin_memory_device="",
        in_order=True,
    ):
        num_workers = check_int("num_workers", num_workers, 0)
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set "
                             "prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None:
            check_int("prefetch_factor", prefetch_factor, 0)
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None:
            if num_workers == 0:
                raise ValueError("multiprocessing_context can only be used with multi-process "
                                 "loading (num_workers > 0), but got num_workers=0")
            start_method(multiprocessing_context)
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
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._passes = 0
        self._pool = None

    def __iter__(self):
        """Draw this pass's base seed now, as PyTorch does, and return its iterator."""
        if self.pin_memory:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                          "then device pinned memory won't be used.", stacklevel=2)
        base_seed = self._base_seed()
        if self.num_workers == 0:
            return self._in_process(iter(self.batch_sampler))
        if self._pool is None or not self._pool.processes:
            pool = _WorkerPool(self, base_seed, fetch)
            self._pool = pool if self.persistent_workers else None
        else:
            pool = self._pool
        return MultiProcessIterator(self, pool, iter(self.batch_sampler))

    def _base_seed(self):
        self._passes += 1
        if self.generator is None or isinstance(self.generator, Generator):
            return randint(2**63 - 1, size=(), generator=self.generator).item()
        # An int seed: derive the pass's seed from it, keeping the order of passes a
        # pure function of (seed, pass) as the samplers' orders are.
        return int(epoch_rng(seed_from(self.generator), self._passes).integers(2**63 - 1))

    def _in_process(self, batches):
        gather = self._array_gather()
        for indices in batches:
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
        arrays = [t._array for t in dataset.tensors]

        def gather(indices):
            rows = np.asarray(indices, dtype=np.intp)
            if positions is not None:
                rows = positions[rows]
            # A tuple sample collates to a list, so the batch is a list here too.
            return [from_numpy(a[rows]) for a in arrays]

        return gather


def fetch(dataset, collate_fn, indices):
    """One batch, read sample by sample (what a worker process runs)."""
    return collate_fn([dataset[i] for i in indices])
