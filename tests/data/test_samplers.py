import pytest

import mpigrad as mg
from mpigrad.data import BatchSampler, RandomSampler, SequentialSampler

DATA = range(10)


def test_sequential_sampler_is_in_order():
    assert list(SequentialSampler(DATA)) == list(range(10))
    assert len(SequentialSampler(DATA)) == 10


def test_random_sampler_yields_a_permutation_of_python_ints():
    order = list(RandomSampler(DATA, generator=0))
    assert sorted(order) == list(range(10)) and order != list(range(10))
    assert all(type(i) is int for i in order)


def test_random_order_is_a_pure_function_of_seed_and_epoch():
    first = RandomSampler(DATA, generator=5)
    passes = [list(first) for _ in range(3)]
    assert passes[0] != passes[1] != passes[2]
    again = RandomSampler(DATA, generator=5)
    again.set_epoch(1)
    assert list(again) == passes[1] and list(again) == passes[2]
    assert list(RandomSampler(DATA, generator=6)) != passes[0]


def test_generator_object_seeds_the_order():
    seeded = list(RandomSampler(DATA, generator=mg.Generator().manual_seed(7)))
    assert seeded == list(RandomSampler(DATA, generator=7))


def test_default_generator_makes_manual_seed_reproducible():
    mg.manual_seed(11)
    first = list(RandomSampler(DATA))
    second = list(RandomSampler(DATA))
    mg.manual_seed(11)
    assert list(RandomSampler(DATA)) == first and list(RandomSampler(DATA)) == second
    assert second != first


def test_num_samples_beyond_the_dataset_chains_permutations():
    order = list(RandomSampler(DATA, num_samples=25, generator=0))
    assert len(order) == 25
    assert sorted(order[:10]) == sorted(order[10:20]) == list(range(10))
    assert len(set(order[20:])) == 5


def test_replacement_draws_independently():
    sampler = RandomSampler(DATA, replacement=True, num_samples=200, generator=0)
    order = list(sampler)
    assert len(order) == len(sampler) == 200
    assert set(order) == set(range(10))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_samples=0), "num_samples should be an integer >= 1"),
        (dict(replacement=1), "replacement should be a boolean"),
        (dict(generator=-1), "generator should be an integer >= 0"),
        (dict(generator=1.5), "generator should be an integer >= 0"),
    ],
)
def test_random_sampler_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RandomSampler(DATA, **kwargs)


def test_random_sampler_on_empty_dataset():
    with pytest.raises(ValueError, match="integer >= 1, but got num_samples=0"):
        RandomSampler([])
    with pytest.raises(ValueError, match="empty dataset"):
        iter(RandomSampler([], num_samples=3))


@pytest.mark.parametrize(
    "drop_last, expected",
    [(False, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]), (True, [[0, 1, 2, 3], [4, 5, 6, 7]])],
)
def test_batch_sampler_groups_indices(drop_last, expected):
    sampler = BatchSampler(SequentialSampler(DATA), 4, drop_last)
    assert list(sampler) == expected
    assert len(sampler) == len(expected)


def test_batch_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size should be an integer >= 1, but got .*=0"):
        BatchSampler(DATA, 0, False)
    with pytest.raises(ValueError, match="drop_last should be a boolean"):
        BatchSampler(DATA, 2, None)
