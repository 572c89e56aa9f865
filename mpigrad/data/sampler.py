"""Samplers: the order in which a DataLoader visits a dataset's indices.

Shuffled orders here are a pure function of `(seed, epoch)`: nothing else
(no global random state, no previous iteration) affects them. That is what
makes them identical on every rank and reproducible after a restart; see the
package docstring for how a job resumes mid-epoch.
"""
import itertools
from itertools import islice

import numpy as np

from ..creation import as_tensor, randint
from ..dtypes import float64
from ..random import Generator, multinomial_array
from ._checks import check_bool, check_int


def epoch_rng(seed, epoch):
    """The random stream for one epoch of a shuffled order."""
    return np.random.default_rng([seed, epoch])


def draw_seed():
    """One 63-bit seed from the default generator: the single draw PyTorch makes
    (`torch.empty((), dtype=torch.int64).random_()`) wherever it needs a fresh seed."""
    return randint(2**63 - 1, size=()).item()


def seed_from(generator):
    """The integer seed a sampler derives its orders from.

    `generator` may be a non-negative int, an `mpigrad.Generator` (its
    initial seed; its current state plays no part), or None to draw a seed
    from mpigrad's default generator, so that `mpigrad.manual_seed` makes
    the orders reproducible, as in PyTorch.
    """
    if generator is None:
        return draw_seed()
    if isinstance(generator, Generator):
        return int(generator.initial_seed())
    return check_int("generator", generator, 0)


class Sampler:
    """Base class: iterating a sampler yields dataset indices (Python ints)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class SequentialSampler(Sampler):
    """Indices `0, 1, ..., len(data_source) - 1` in order."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class _SeededPasses(Sampler):
    """A sampler whose pass `e` draws from the stream for `(seed, e)`.

    Passes count up from 0, and `set_epoch` moves the count, e.g. to resume a
    checkpointed job at its epoch. Without a `generator`, each pass draws its
    seed from mpigrad's default generator when iteration starts, as PyTorch
    does: building the sampler draws nothing, so the random numbers drawn after
    it (a model's initialisation) are the same as in a script without it.
    """

    def _seed_passes(self, generator):
        self.generator = generator
        # None: a fresh seed per pass, drawn in _next_pass.
        self.seed = None if generator is None else seed_from(generator)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = check_int("epoch", epoch, 0)

    def _next_pass(self):
        """The random stream of the pass that starts now."""
        seed = draw_seed() if self.seed is None else self.seed
        rng = epoch_rng(seed, self.epoch)
        self.epoch += 1
        return rng


class RandomSampler(_SeededPasses):
    """A fresh random order of `data_source`'s indices on every pass.

    Without replacement each pass is a permutation (several concatenated, the
    last cut short, if `num_samples` exceeds the dataset); with replacement
    it is `num_samples` independent draws. Seeding and epochs as
    `_SeededPasses`.
    """

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = check_bool("replacement", replacement)
        self._num_samples = num_samples
        check_int("num_samples", self.num_samples, 1)
        self._seed_passes(generator)

    @property
    def num_samples(self):
        # Read len() lazily: the dataset may change size after the sampler is built.
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, count = len(self.data_source), self.num_samples
        if n == 0:
            raise ValueError("RandomSampler cannot draw from an empty dataset")
        return _draws(self._next_pass(), n, count, self.replacement)

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(_SeededPasses):
    """The elements of `indices` in a fresh random order on every pass (seeding and
    epochs as `_SeededPasses`)."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self._seed_passes(generator)

    def __iter__(self):
        order = self._next_pass().permutation(len(self.indices)).tolist()
        return (self.indices[position] for position in order)

    def __len__(self):
        return len(self.indices)


class _Stream:
    """The one thing `multinomial_array` reads from a generator: its numpy stream."""

    def __init__(self, rng):
        self.rng = rng


class WeightedRandomSampler(_SeededPasses):
    """`num_samples` indices below `len(weights)`, index `i` drawn with probability
    proportional to `weights[i]`, with or without replacement (a zero weight is drawn
    never with replacement, only after every positive one without), as
    `mpigrad.multinomial` draws them (its errors for bad weights). Seeding and epochs
    as `_SeededPasses`."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        check_bool("replacement", replacement)
        weights = as_tensor(weights, dtype=float64)
        if weights.ndim != 1:
            raise ValueError("weights should be a 1d sequence but given weights have shape "
                             f"{tuple(weights.shape)}")
        self.weights = weights
        self.num_samples = num_samples
        self.replacement = replacement
        self._seed_passes(generator)

    def __iter__(self):
        picks = multinomial_array(self.weights._array, self.num_samples, self.replacement,
                                  generator=_Stream(self._next_pass()))
        return iter(picks.tolist())

    def __len__(self):
        return self.num_samples


# Indices drawn at a time with replacement: a pass of any length (torch's
# num_samples=10**10) costs this much memory, not an array of all its indices.
_CHUNK = 1 << 16


def _draws(rng, n, count, replacement):
    """A pass's `count` indices below `n`, drawn as they are consumed: independent draws in
    chunks, or one permutation of the dataset after another (the last cut short)."""
    if replacement:
        for start in range(0, count, _CHUNK):
            yield from rng.integers(n, size=min(_CHUNK, count - start)).tolist()
    else:
        for start in range(0, count, n):
            yield from rng.permutation(n)[:count - start].tolist()


class InfiniteConstantSampler(Sampler):
    """None forever: the placeholder indices a DataLoader over an `IterableDataset`
    batches up, the dataset deciding where its stream ends."""

    def __iter__(self):
        return itertools.repeat(None)


class BatchSampler(Sampler):
    """Groups the indices of `sampler` into lists of `batch_size`.

    The last, shorter batch is kept unless `drop_last` is true.
    """

    def __init__(self, sampler, batch_size, drop_last):
        self.sampler = sampler
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.drop_last = check_bool("drop_last", drop_last)

    def __iter__(self):
        indices = iter(self.sampler)
        while batch := list(islice(indices, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)
