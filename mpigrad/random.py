"""Seeded random numbers. One default generator, as in torch; `Generator` for private streams."""
import numpy as np

from . import dtypes


class Generator:
    """A numpy PCG64 stream with torch's seeding interface."""

    def __init__(self, seed=None):
        self.manual_seed(np.random.SeedSequence().entropy if seed is None else seed)

    def manual_seed(self, seed):
        self._seed = int(seed)
        self.rng = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """The full stream state, as a dict of plain values (fits in a checkpoint)."""
        return {"seed": self._seed, "bit_generator": self.rng.bit_generator.state}

    def set_state(self, state):
        self._seed = int(state["seed"])
        self.rng.bit_generator.state = state["bit_generator"]


default_generator = Generator(0)


def manual_seed(seed):
    return default_generator.manual_seed(seed)


def seed():
    return default_generator.manual_seed(np.random.SeedSequence().entropy).initial_seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(state):
    default_generator.set_state(state)


def _rng(generator):
    return (generator or default_generator).rng


def _float_dtype(dtype):
    return dtypes.get_default_dtype() if dtype is None else np.dtype(dtype)


def normal_array(shape, mean, std, dtype, generator=None):
    return _rng(generator).normal(mean, std, size=shape).astype(_float_dtype(dtype), copy=False)


def uniform_array(shape, low, high, dtype, generator=None):
    return _rng(generator).uniform(low, high, size=shape).astype(_float_dtype(dtype), copy=False)


def integers_array(low, high, shape, dtype, generator=None):
    return _rng(generator).integers(low, high, size=shape).astype(dtype or np.int64, copy=False)


def permutation_array(n, generator=None):
    return _rng(generator).permutation(n).astype(np.int64)
