import numpy as np
import pytest

import mpigrad as mg
from mpigrad.data import DataLoader, Subset, random_split

torch_split_cases = [[3, 7], [0.3, 0.3, 0.4], [0.5, 0.5], [0.1] * 10, [1 / 3] * 3, [0.25, 0.75]]


@pytest.mark.parametrize("lengths", torch_split_cases)
def test_lengths_and_fractions_give_torchs_split_sizes(lengths):
    torch = pytest.importorskip("torch")
    for n in (10, 11, 29):
        if sum(lengths) > 1 and sum(lengths) != n:
            continue
        ours = random_split(range(n), lengths, generator=mg.Generator(1))
        theirs = torch.utils.data.random_split(range(n), lengths,
                                               generator=torch.Generator().manual_seed(1))
        assert [len(s) for s in ours] == [len(s) for s in theirs]
        assert all(isinstance(s, Subset) for s in ours)
        assert sorted(i for s in ours for i in s) == list(range(n))


def test_the_split_is_one_permutation_from_the_generator():
    parts = random_split(range(10), [4, 6], generator=mg.Generator(3))
    order = mg.randperm(10, generator=mg.Generator(3)).tolist()
    assert list(parts[0]) == order[:4] and list(parts[1]) == order[4:]
    mg.manual_seed(8)
    first = [list(p) for p in random_split(range(10), [0.5, 0.5])]
    mg.manual_seed(8)
    assert [list(p) for p in random_split(range(10), [0.5, 0.5])] == first


def test_bad_lengths_are_torchs_errors():
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        random_split(range(10), [3, 3])
    with pytest.raises(ValueError, match="Fraction at index 1 is not between 0 and 1"):
        random_split(range(10), [0.5, 1.5, -1.0])
    with pytest.warns(UserWarning, match="Length of split at index 2 is 0"):
        random_split(range(2), [0.5, 0.5, 0.0])


def _draws_after_iter_and_first_batch(seed, make_loader, rng_state, manual_seed):
    """The generator states after building the loader, after iter() and after the first
    batch, as numbers of single seed draws from a freshly seeded generator."""
    manual_seed(seed)
    loader = make_loader()
    states = [rng_state()]
    batches = iter(loader)
    states.append(rng_state())
    next(batches)
    states.append(rng_state())
    return states


def _count_draws(states, seed, manual_seed, rng_state, draw):
    manual_seed(seed)
    reference = [rng_state()]
    for _ in range(4):
        draw()
        reference.append(rng_state())
    return [next(k for k, r in enumerate(reference) if _same(r, s)) for s in states]


def _same(a, b):
    if isinstance(a, dict):
        return a == b
    return bool((a == b).all())


def test_shuffle_draws_its_seeds_when_iterated_in_torchs_order():
    torch = pytest.importorskip("torch")
    data = np.arange(12, dtype=np.float32)

    def ours():
        return DataLoader(mg.data.TensorDataset(mg.from_numpy(data)), batch_size=4,
                          shuffle=True)

    def theirs():
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
            torch.from_numpy(data)), batch_size=4, shuffle=True)

    ours_counts = _count_draws(
        _draws_after_iter_and_first_batch(0, ours, mg.get_rng_state, mg.manual_seed),
        0, mg.manual_seed, mg.get_rng_state, lambda: mg.randint(2**63 - 1, size=()))
    theirs_counts = _count_draws(
        _draws_after_iter_and_first_batch(0, theirs, torch.get_rng_state, torch.manual_seed),
        0, torch.manual_seed, torch.get_rng_state,
        lambda: torch.empty((), dtype=torch.int64).random_())
    # Building draws nothing, iter() draws the base seed, the first batch the sampler's seed.
    assert ours_counts == theirs_counts == [0, 1, 2]


def test_a_model_built_after_the_loader_gets_the_same_weights_as_without_it():
    mg.manual_seed(4)
    expected = mg.nn.Linear(3, 2).weight.detach().numpy().copy()
    mg.manual_seed(4)
    loader = DataLoader(range(6), batch_size=2, shuffle=True)
    np.testing.assert_array_equal(mg.nn.Linear(3, 2).weight.data, expected)
    assert sorted(int(i) for batch in loader for i in batch) == list(range(6))
