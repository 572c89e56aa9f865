import itertools

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    Partition,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
)


def _dataset(n=10):
    images = np.arange(n * 2 * 3, dtype=np.float32).reshape(n, 2, 3)
    return TensorDataset(mg.from_numpy(images), mg.from_numpy(np.arange(n) % 3))


def _labels(loader):
    return [y.data.tolist() for _, y in loader]


def _per_sample(batch):
    # A collate_fn other than default_collate itself, so the loader collates sample by sample.
    return default_collate(batch)


def test_batches_in_order_with_short_last_batch():
    loader = DataLoader(_dataset(), batch_size=4)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    images, labels = batches[0]
    assert images.shape == (4, 2, 3) and images.dtype == np.float32 and labels.dtype == np.int64
    np.testing.assert_array_equal(images.data, np.arange(24).reshape(4, 2, 3))
    assert _labels(loader) == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0]]


def test_drop_last_drops_the_short_batch():
    loader = DataLoader(_dataset(), batch_size=4, drop_last=True)
    assert len(loader) == 2 and [len(y) for _, y in loader] == [4, 4]


def test_array_gather_gives_the_same_batches_as_collating_samples():
    dataset = _dataset(23)
    fast = list(DataLoader(dataset, batch_size=5, shuffle=True, generator=1))
    slow = list(
        DataLoader(dataset, batch_size=5, shuffle=True, generator=1, collate_fn=_per_sample)
    )
    assert len(fast) == len(slow) == 5
    for fast_batch, slow_batch in zip(fast, slow):
        assert type(fast_batch) is type(slow_batch) is list
        for a, b in zip(fast_batch, slow_batch):
            assert isinstance(a, mg.Tensor) and a.dtype == b.dtype
            np.testing.assert_array_equal(a.data, b.data)


def test_nested_subsets_and_partitions_resolve_to_the_right_rows():
    dataset = _dataset(10)
    nested = Partition(Subset(dataset, [9, 8, 7, 6, 5, 4]), [5, 0, 2])
    (images, labels), = DataLoader(nested, batch_size=3)
    np.testing.assert_array_equal(labels.data, [4 % 3, 9 % 3, 7 % 3])
    np.testing.assert_array_equal(images.data[:, 0, 0], [24, 54, 42])


def test_batches_are_copies_not_views_of_the_dataset():
    dataset = _dataset(4)
    images, _ = next(iter(DataLoader(dataset, batch_size=4)))
    images.data[...] = -1
    assert dataset.tensors[0].data.min() == 0


def test_tensors_that_require_grad_are_collated_through_the_graph():
    weights = mg.tensor(np.ones((4, 2), np.float32), requires_grad=True)
    (batch,) = next(iter(DataLoader(TensorDataset(weights), batch_size=3)))
    assert batch.requires_grad and batch.shape == (3, 2)


def test_subclass_overriding_getitem_is_not_bypassed():
    class Negated(TensorDataset):
        def __getitem__(self, index):
            x, y = super().__getitem__(index)
            return mg.from_numpy(-x.detach().numpy()), y

    (images, _), = DataLoader(Negated(*_dataset(2).tensors), batch_size=2)
    assert images.data.max() <= 0 and images.data.min() < 0


def test_custom_collate_fn_sees_the_list_of_samples():
    seen = []

    def count(samples):
        seen.append(samples)
        return len(samples)

    assert list(DataLoader(_dataset(5), batch_size=2, collate_fn=count)) == [2, 2, 1]
    assert all(isinstance(s, list) and isinstance(s[0], tuple) for s in seen)


def test_any_map_style_dataset_with_dict_samples():
    class Squares(Dataset):
        def __getitem__(self, index):
            return {"x": np.float32(index), "y": index * index}

        def __len__(self):
            return 5

    batch = next(iter(DataLoader(Squares(), batch_size=3)))
    assert batch["x"].dtype == np.float32
    np.testing.assert_array_equal(batch["y"].data, [0, 1, 4])


def test_shuffle_is_reproducible_from_the_generator_and_differs_by_epoch():
    loader = DataLoader(_dataset(), batch_size=4, shuffle=True, generator=3)
    first, second = _labels(loader), _labels(loader)
    assert first != second
    assert sorted(sum(first, [])) == sorted(np.arange(10) % 3)
    generator = mg.Generator().manual_seed(3)
    same_seed = DataLoader(_dataset(), batch_size=4, shuffle=True, generator=generator)
    assert _labels(same_seed) == first and _labels(same_seed) == second


def test_resuming_mid_epoch_replays_the_rest_of_that_epoch():
    dataset = TensorDataset(mg.from_numpy(np.arange(20)))
    run = DataLoader(dataset, batch_size=3, shuffle=True, generator=9)
    epochs = [[x.data.tolist() for x, in run] for _ in range(3)]

    resumed = DataLoader(dataset, batch_size=3, shuffle=True, generator=9)
    resumed.sampler.set_epoch(1)
    tail = [x.data.tolist() for x, in itertools.islice(resumed, 4, None)]
    assert tail == epochs[1][4:]
    assert [x.data.tolist() for x, in resumed] == epochs[2]


def test_distributed_sampler_gives_every_rank_the_same_number_of_batches():
    dataset = _dataset(11)
    loaders = [
        DataLoader(dataset, batch_size=2, sampler=DistributedSampler(dataset, 3, rank))
        for rank in range(3)
    ]
    assert [len(loader) for loader in loaders] == [2, 2, 2]
    seen = [
        int(x.data[i, 0, 0]) // 6 for loader in loaders for x, _ in loader for i in range(len(x))
    ]
    assert len(seen) == 12 and set(seen) == set(range(11))


def test_batch_sampler_option():
    loader = DataLoader(_dataset(), batch_sampler=[[3, 1], [0]])
    assert _labels(loader) == [[0, 1], [0]] and len(loader) == 2
    sampler = BatchSampler(SequentialSampler(range(10)), 6, drop_last=True)
    assert len(DataLoader(_dataset(), batch_sampler=sampler)) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=0), "batch_size should be an integer >= 1"),
        (dict(batch_size=None, drop_last=True), "batch_size=None option disables auto-batching"),
        (dict(drop_last="yes"), "drop_last should be a boolean"),
        (dict(shuffle=True, sampler=SequentialSampler(range(10))), "exclusive with shuffle"),
        (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler option is mutually exclusive"),
        (dict(batch_sampler=[[0]], drop_last=True), "batch_sampler option is mutually exclusive"),
    ],
)
def test_bad_arguments_say_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataLoader(_dataset(), **kwargs)
