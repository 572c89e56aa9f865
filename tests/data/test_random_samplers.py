"""WeightedRandomSampler and SubsetRandomSampler: torch's arguments, errors and laws.

mpigrad's random streams are its own (numpy's PCG64), not torch's, so as with
RandomSampler the indices drawn are checked for what torch promises of them (weights
followed, zero weights never drawn, no repeats without replacement, every index once
per pass) and for mpigrad's own promise: a pure function of (seed, epoch)."""
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as torch_data  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.utils.data as mpigrad_data  # noqa: E402

WEIGHTS = [0.1, 0.9, 0.0, 0.7, 3.0, 0.3]


def test_weighted_draws_follow_the_weights_and_never_draw_a_zero_weight():
    sampler = mpigrad_data.WeightedRandomSampler(WEIGHTS, 40000, generator=mg.Generator(1))
    counts = Counter(sampler)
    assert len(sampler) == 40000 and sum(counts.values()) == 40000
    assert counts[2] == 0
    expected = np.array(WEIGHTS) / sum(WEIGHTS) * 40000
    observed = np.array([counts[i] for i in range(len(WEIGHTS))])
    # Five standard deviations of a binomial count: fails by chance about once in 10**6.
    assert np.all(np.abs(observed - expected) <= 5 * np.sqrt(expected) + 1)


def test_weighted_without_replacement_never_repeats_and_favours_heavy_weights():
    firsts = Counter()
    for seed in range(300):
        sampler = mpigrad_data.WeightedRandomSampler(WEIGHTS, 5, replacement=False,
                                                     generator=mg.Generator(seed))
        drawn = list(sampler)
        assert sorted(drawn) == [0, 1, 3, 4, 5]  # all five non-zero weights, once each
        firsts[drawn[0]] += 1
    assert firsts.most_common(1)[0][0] == 4  # weight 3.0 of 5.0 comes first most often


def test_weighted_passes_are_reproducible_and_differ():
    def make():
        return mpigrad_data.WeightedRandomSampler(WEIGHTS, 20, generator=7)
    sampler = make()
    first, second = list(sampler), list(sampler)
    assert first != second and first == list(make())
    sampler.set_epoch(1)
    assert list(sampler) == second
    mg.manual_seed(3)
    unseeded = list(mpigrad_data.WeightedRandomSampler(WEIGHTS, 20))
    mg.manual_seed(3)
    assert list(mpigrad_data.WeightedRandomSampler(WEIGHTS, 20)) == unseeded


def test_weighted_holds_its_weights_as_torch_does():
    ours = mpigrad_data.WeightedRandomSampler(np.array([1, 2, 3]), 2)
    theirs = torch_data.WeightedRandomSampler(np.array([1, 2, 3]), 2)
    assert str(ours.weights.dtype) == "float64" and theirs.weights.dtype == torch.float64
    assert ours.weights.tolist() == theirs.weights.tolist()
    assert (ours.num_samples, ours.replacement) == (theirs.num_samples, theirs.replacement)


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((WEIGHTS, 0), {}, ValueError, "num_samples should be a positive integer value"),
    ((WEIGHTS, 2.0), {}, ValueError, "num_samples should be a positive integer value"),
    ((WEIGHTS, True), {}, ValueError, "num_samples should be a positive integer value"),
    ((WEIGHTS, 2), dict(replacement=1), ValueError, "replacement should be a boolean value"),
    (([[1.0, 2.0]], 2), {}, ValueError, r"weights should be a 1d sequence"),
])
def test_weighted_argument_errors_are_torchs(args, kwargs, error, message):
    for data in (mpigrad_data, torch_data):
        with pytest.raises(error, match=message):
            data.WeightedRandomSampler(*args, **kwargs)


@pytest.mark.parametrize("weights, num_samples, replacement", [
    ([1.0, -1.0], 1, True),
    ([0.0, 0.0], 1, True),
    ([1.0, 2.0], 3, False),
])
def test_weights_torch_cannot_draw_from_are_its_runtime_error_when_drawn(
        weights, num_samples, replacement):
    for data in (mpigrad_data, torch_data):
        sampler = data.WeightedRandomSampler(weights, num_samples, replacement=replacement)
        with pytest.raises(RuntimeError):
            list(sampler)


def test_subset_random_sampler_visits_each_index_once_per_pass():
    indices = [7, 3, 11, 5, 20]
    sampler = mpigrad_data.SubsetRandomSampler(indices, generator=mg.Generator(4))
    passes = [list(sampler) for _ in range(4)]
    assert len(sampler) == len(torch_data.SubsetRandomSampler(indices)) == 5
    assert all(sorted(p) == sorted(indices) for p in passes)
    assert len({tuple(p) for p in passes}) > 1
    again = mpigrad_data.SubsetRandomSampler(indices, generator=mg.Generator(4))
    assert list(again) == passes[0]


def test_samplers_drive_a_dataloader():
    data = mg.arange(30)
    dataset = mpigrad_data.TensorDataset(data)
    subset = list(range(0, 30, 3))
    loader = mpigrad_data.DataLoader(dataset, batch_size=4,
                                     sampler=mpigrad_data.SubsetRandomSampler(subset))
    seen = [i for (batch,) in loader for i in batch.tolist()]
    assert sorted(seen) == subset and len(loader) == 3
    weighted = mpigrad_data.WeightedRandomSampler([0.0] * 29 + [1.0], 6)
    assert [b[0].tolist() for b in mpigrad_data.DataLoader(dataset, batch_size=3,
                                                           sampler=weighted)] == [[29] * 3] * 2


def test_weighted_without_replacement_draws_zero_weights_last_as_torch():
    """torch draws every positive weight, then the zero ones, when num_samples asks for
    more indices than there are positive weights (replacement=False)."""
    count = len(WEIGHTS)
    positive = {i for i, w in enumerate(WEIGHTS) if w > 0}
    for sampler in (mpigrad_data.WeightedRandomSampler(WEIGHTS, count, replacement=False,
                                                       generator=mg.Generator(2)),
                    torch_data.WeightedRandomSampler(WEIGHTS, count, replacement=False)):
        drawn = list(sampler)
        assert sorted(drawn) == list(range(count))
        assert set(drawn[:len(positive)]) == positive
