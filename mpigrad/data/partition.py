"""Splitting a dataset into fractions, as in PyTorch's distributed tutorial.

The usual data-parallel use gives every rank an equal share::

    size = mpigrad.distributed.get_world_size()
    shard = DataPartitioner(dataset, [1 / size] * size).use(mpigrad.distributed.get_rank())

Every rank builds the same partitioner from the same seed, so the shares
are disjoint without any communication.
"""
import math
import numbers

import numpy as np

from ._checks import check_int
from .dataset import Subset


class Partition(Subset):
    """One part of a dataset split by a `DataPartitioner`."""


class DataPartitioner:
    """Shuffle the indices of `data` with `seed` and cut them into parts.

    Part `i` gets `floor(sizes[i] * len(data))` indices; the fractions
    must be non-negative and sum to at most 1, and whatever they leave over
    is in no part.
    """

    def __init__(self, data, sizes=(0.7, 0.2, 0.1), seed=1234):
        sizes = list(sizes)
        if not sizes or any(not isinstance(f, numbers.Real) or f < 0 for f in sizes):
            raise ValueError(f"sizes should be a non-empty list of fractions >= 0, got {sizes}")
        # Allow rounding error: seven parts of 1/7 may add up to a hair over 1.
        if math.fsum(sizes) > 1 + 1e-9:
            raise ValueError(f"sizes should sum to at most 1, got {sizes} (sum {math.fsum(sizes)})")
        self.data = data
        self.seed = check_int("seed", seed, 0)
        order = np.random.default_rng(self.seed).permutation(len(data)).tolist()
        self.partitions = []
        start = 0
        for fraction in sizes:
            # Round first: 0.29 * 100 is 28.999999999999996 in binary floating point,
            # and a fraction written in decimal should give the length it reads as.
            length = math.floor(round(fraction * len(data), 6))
            self.partitions.append(order[start : start + length])
            start += length

    def use(self, partition):
        """The `partition`-th part, as a dataset."""
        if not 0 <= partition < len(self.partitions):
            raise IndexError(
                f"partition {partition} out of range: this partitioner has "
                f"{len(self.partitions)} parts, numbered 0 to {len(self.partitions) - 1}"
            )
        return Partition(self.data, self.partitions[partition])

    def __len__(self):
        return len(self.partitions)
