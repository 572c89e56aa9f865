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



def multinomial_array(weights, num_samples, replacement, generator=None):
    """`num_samples` indices drawn from each row of the 1-D or 2-D non-negative `weights`,
    int64, with torch.multinomial's checks and errors.

    With replacement, inverse-CDF sampling of uniform draws; without, the Efraimidis-Spirakis
    keys u ** (1 / w), whose largest `num_samples` are a weighted sample without replacement
    (computed as log(u) / w to stay in range). With replacement a zero weight is never drawn;
    without, zero-weight categories come after every positive one, as torch's CPU kernel
    draws them once the positive ones run out (their key is -inf)."""
    if weights.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not dtypes.is_floating_point(weights.dtype):  # bfloat16's numpy kind is not "f"
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{dtypes.torch_name(weights.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    rows = weights.reshape(-1, weights.shape[-1]).astype(np.float64)
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if (rows.sum(axis=1) <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    rng = _rng(generator)
    if replacement:
        cumulative = np.cumsum(rows, axis=1)
        draws = rng.random((rows.shape[0], num_samples)) * cumulative[:, -1:]
        picks = np.stack([np.searchsorted(c, d, side="right")
                          for c, d in zip(cumulative, draws)])
        picks = np.minimum(picks, rows.shape[1] - 1)
    else:
        with np.errstate(divide="ignore"):
            keys = np.log(rng.random(rows.shape)) / rows
        picks = np.argsort(-keys, axis=1, kind="stable")[:, :num_samples]
    return picks.astype(np.int64).reshape(weights.shape[:-1] + (num_samples,))
