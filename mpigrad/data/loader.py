"""DataLoader: batches of a dataset in the order a sampler gives."""
import warnings
from itertools import islice

import numpy as np

from ..creation import from_numpy, randint
from ..random import Generator

from .collate import default_collate, default_convert
from ._checks import check_int
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import (BatchSampler, InfiniteConstantSampler, RandomSampler, SequentialSampler,
                      epoch_rng, seed_from)
from .worker import EndOfStream, MultiProcessIterator, _WorkerPool, start_method


def _reads(dataset):
    """The methods that read `dataset`'s samples. Compared by identity: a subclass that
    overrides either may change what a sample is, so only the inherited pair vouches for
    plain rows of arrays."""
    kind = type(dataset)
    return getattr(kind, "__getitem__", None), getattr(kind, "__getitems__", None)


class DataLoader:
    """Iterate over `dataset` in batches.

    Args:
        dataset: a map-style dataset (`__getitem__` and `__len__`), or an
            `IterableDataset`, read in its own order (no shuffle or sampler); with
            workers, each iterates its own copy (see `IterableDataset`).
        batch_size: samples per batch; None turns batching off: each sample
            (at each index the sampler yields) goes through `collate_fn`
            alone, `default_convert` by default.
        shuffle: visit the samples in a fresh random order each pass
            (a `RandomSampler` seeded from `generator`).
        sampler: the order of the indices, e.g. a `DistributedSampler`;
            excludes `shuffle`.
        batch_sampler: yields whole lists of indices; excludes
            `batch_size`, `shuffle`, `sampler` and `drop_last`.
        drop_last: drop the last batch if it is smaller than `batch_size`.
        collate_fn: turns a list of samples into a batch
            (`default_collate` if not given; `default_convert` of one sample
            when batching is off).
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
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            # IterableDataset: its own order, so nothing may choose one.
            if shuffle not in (False, None):
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError(
                "sampler option is mutually exclusive with shuffle: the sampler decides the "
                "order (use DistributedSampler(shuffle=True) or RandomSampler instead)"
            )
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self._auto_collation = batch_sampler is not None
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
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
            return self._in_process(iter(self._index_sampler))
        if self._pool is None or not self._pool.processes:
            pool = _WorkerPool(self, base_seed, self._fetcher())
            self._pool = pool if self.persistent_workers else None
        else:
            pool = self._pool
        return MultiProcessIterator(self, pool, iter(self._index_sampler))

    @property
    def _index_sampler(self):
        """What yields each batch's indices: the batch sampler, or the sampler when
        batching is off."""
        return self.batch_sampler if self._auto_collation else self.sampler

    def _fetcher(self):
        if self._iterable:
            return IterableFetcher(self._auto_collation, self.drop_last)
        return MapFetcher(self._auto_collation)

    def _base_seed(self):
        self._passes += 1
        if self.generator is None or isinstance(self.generator, Generator):
            return randint(2**63 - 1, size=(), generator=self.generator).item()
        # An int seed: derive the pass's seed from it, keeping the order of passes a
        # pure function of (seed, pass) as the samplers' orders are.
        return int(epoch_rng(seed_from(self.generator), self._passes).integers(2**63 - 1))

    def _in_process(self, batches):
        gather = self._array_gather()
        fetcher = self._fetcher()
        for indices in batches:
            if gather is not None:
                yield gather(indices)
                continue
            batch = fetcher.fetch(self.dataset, self.collate_fn, 0, indices)
            if isinstance(batch, EndOfStream):
                return
            yield batch

    def __len__(self):
        if not self._iterable:
            return len(self._index_sampler)
        # TypeError, as len() of any object without __len__, unless the dataset has one.
        length = len(self.dataset)
        if self.batch_size is None:
            return length
        return length // self.batch_size if self.drop_last else -(-length // self.batch_size)

    def _array_gather(self):
        """A function from batch indices to the batch, reading the dataset's arrays
        directly, or None when the dataset is not one whose samples are plain rows
        of arrays (or a custom collate_fn must see the samples)."""
        if self.collate_fn is not default_collate or not self._auto_collation or self._iterable:
            return None
        dataset, positions = self.dataset, None
        while _reads(dataset) == (Subset.__getitem__, Subset.__getitems__):
            subset = np.asarray(dataset.indices, dtype=np.intp)
            positions = subset if positions is None else subset[positions]
            dataset = dataset.dataset
        if _reads(dataset) != (TensorDataset.__getitem__, None) or any(
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


class MapFetcher:
    """Reads a map-style dataset's batch (or, batching off, its one sample) at the
    indices given (what a worker process or the loader runs)."""

    def __init__(self, auto_collation):
        self.auto_collation = auto_collation

    def fetch(self, dataset, collate_fn, pass_id, indices):
        if not self.auto_collation:
            return collate_fn(dataset[indices])
        # As torch's: a dataset that reads a batch at once says so with __getitems__.
        read_batch = getattr(dataset, "__getitems__", None)
        if read_batch:
            return collate_fn(read_batch(indices))
        return collate_fn([dataset[i] for i in indices])


class IterableFetcher:
    """Reads the next batch (as many samples as `indices` has placeholders; or, batching
    off, the next sample) of this process's iterator over an iterable dataset, one
    iterator per pass; an `EndOfStream` once it is exhausted, or when only a short
    batch is left and `drop_last` is set."""

    def __init__(self, auto_collation, drop_last):
        self.auto_collation = auto_collation
        self.drop_last = drop_last
        self.pass_id = None

    def fetch(self, dataset, collate_fn, pass_id, indices):
        if pass_id != self.pass_id:
            self.pass_id, self.samples, self.ended = pass_id, iter(dataset), False
        if self.ended:
            return EndOfStream()
        if not self.auto_collation:
            sample = next(self.samples, _NO_SAMPLE)
            if sample is _NO_SAMPLE:
                self.ended = True
                return EndOfStream()
            return collate_fn(sample)
        samples = list(islice(self.samples, len(indices)))
        if len(samples) < len(indices):
            self.ended = True
            if not samples or self.drop_last:
                return EndOfStream()
        return collate_fn(samples)


_NO_SAMPLE = object()
