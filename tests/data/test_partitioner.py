import numpy as np
import pytest

from mpigrad.data import DataPartitioner, Partition

DATA = list(range(100))


def test_parts_have_the_requested_fractions_and_are_disjoint():
    partitioner = DataPartitioner(DATA)
    parts = [partitioner.use(i) for i in range(len(partitioner))]
    assert all(isinstance(p, Partition) for p in parts)
    assert [len(p) for p in parts] == [70, 20, 10]
    samples = [p[i] for p in parts for i in range(len(p))]
    assert sorted(samples) == DATA and samples != DATA


def test_same_seed_same_split_on_every_rank_other_seed_differs():
    sizes = [1 / 3] * 3
    first, again = DataPartitioner(DATA, sizes, seed=7), DataPartitioner(DATA, sizes, seed=7)
    assert first.partitions == again.partitions
    assert DataPartitioner(DATA, sizes, seed=8).partitions != first.partitions
    assert [len(p) for p in first.partitions] == [33, 33, 33]


def test_decimal_fractions_are_not_cut_short_by_binary_rounding():
    partitioner = DataPartitioner(DATA, [0.29, 0.71])
    assert [len(p) for p in partitioner.partitions] == [29, 71]


def test_fractions_may_leave_data_unused():
    assert [len(p) for p in DataPartitioner(DATA, [0.5, np.float32(0.25)]).partitions] == [50, 25]


@pytest.mark.parametrize(
    "sizes, message",
    [([0.8, 0.3], "sum to at most 1"), ([-0.1, 0.5], ">= 0"), ([], "non-empty"), (["a"], ">= 0")],
)
def test_bad_fractions_are_rejected(sizes, message):
    with pytest.raises(ValueError, match=message):
        DataPartitioner(DATA, sizes)


def test_use_out_of_range_names_the_valid_range():
    with pytest.raises(IndexError, match="3 parts, numbered 0 to 2"):
        DataPartitioner(DATA).use(3)
