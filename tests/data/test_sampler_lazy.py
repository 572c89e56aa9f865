"""RandomSampler draws its indices as they are consumed, as torch's does: a pass of 10**10
samples starts at once and holds no array of them."""
import itertools
import tracemalloc

import pytest

import mpigrad as mg
from mpigrad.data import RandomSampler

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("replacement", [True, False])
def test_a_huge_pass_is_drawn_lazily(replacement):
    data = list(range(1000))
    ours = RandomSampler(data, replacement=replacement, num_samples=10**10, generator=0)
    theirs = torch.utils.data.RandomSampler(data, replacement=replacement,
                                            num_samples=10**10)
    assert len(ours) == len(theirs) == 10**10
    tracemalloc.start()
    try:
        first = list(itertools.islice(iter(ours), 200_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # a few chunks and the list of 200000 ints; not 80 GB
    assert len(first) == 200_000 and set(first) <= set(data)
    assert len(set(first)) == 1000  # every index comes up
    if not replacement:  # one permutation after another
        assert sorted(first[:1000]) == data and sorted(first[1000:2000]) == data


def test_short_passes_keep_their_orders_and_lengths():
    mg.manual_seed(0)
    for replacement, num_samples in [(True, 7), (False, 25), (False, None)]:
        sampler = RandomSampler(range(10), replacement, num_samples, generator=3)
        first, second = list(sampler), list(sampler)
        assert len(first) == len(second) == len(sampler)
        assert first != second  # a new order each pass
        sampler.set_epoch(0)
        assert list(sampler) == first  # a pure function of (seed, epoch)
