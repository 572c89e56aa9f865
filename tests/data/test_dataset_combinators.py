"""ConcatDataset, ChainDataset, StackDataset and Dataset.__add__ against torch: samples,
cumulative sizes, negative indices, errors, and their batches through DataLoader."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as torch_data  # noqa: E402

import mpigrad.utils.data as mpigrad_data  # noqa: E402
from torch_twins import plain  # noqa: E402  (tests/data/conftest.py puts it on the path)

FRAMEWORKS = [mpigrad_data, torch_data]


class _Squares:
    """A map-style dataset whose samples are (offset + i, (offset + i) ** 2 as numpy)."""

    def __init__(self, offset, n):
        self.offset, self.n = offset, n

    def __getitem__(self, index):
        if not 0 <= index < self.n:
            raise IndexError(index)
        return self.offset + index, np.float32((self.offset + index) ** 2)

    def __len__(self):
        return self.n


def _concat(data):
    base = type("Squares", (_Squares, data.Dataset), {})
    return data.ConcatDataset([base(0, 3), [(100, np.float32(1)), (101, np.float32(2))],
                               base(10, 0), base(20, 4)])


def test_concat_samples_and_cumulative_sizes_equal_torchs():
    ours, theirs = (_concat(data) for data in FRAMEWORKS)
    assert ours.cumulative_sizes == theirs.cumulative_sizes == [3, 5, 5, 9]
    assert len(ours) == len(theirs) == 9
    for index in range(-9, 9):
        assert plain(ours[index]) == plain(theirs[index])


@pytest.mark.parametrize("index, error", [(-10, ValueError), (9, IndexError)])
def test_concat_index_out_of_range_is_torchs_error(index, error):
    for data in FRAMEWORKS:
        with pytest.raises(error):
            _concat(data)[index]


def test_concat_refuses_what_torch_refuses():
    for data in FRAMEWORKS:
        with pytest.raises(AssertionError, match="should not be an empty iterable"):
            data.ConcatDataset([])
        stream = type("Stream", (data.IterableDataset,), {"__iter__": lambda self: iter([])})
        with pytest.raises(AssertionError, match="does not support IterableDataset"):
            data.ConcatDataset([[1], stream()])


def test_adding_datasets_concatenates_or_chains():
    for data in FRAMEWORKS:
        squares = type("Squares", (_Squares, data.Dataset), {})
        joined = squares(0, 2) + squares(5, 1) + squares(9, 2)
        assert isinstance(joined, data.ConcatDataset)
        assert [joined[i][0] for i in range(len(joined))] == [0, 1, 5, 9, 10]
        stream = type("Stream", (data.IterableDataset,), {
            "__init__": lambda self, items: setattr(self, "items", items),
            "__iter__": lambda self: iter(self.items)})
        chained = stream([1, 2]) + stream([3])
        assert isinstance(chained, data.ChainDataset) and list(chained) == [1, 2, 3]


def test_concat_through_a_dataloader_equals_torchs():
    batches = [[plain(b) for b in data.DataLoader(_concat(data), batch_size=4)]
               for data in FRAMEWORKS]
    assert batches[0] == batches[1]


def test_chain_reads_streams_in_turn_and_refuses_map_style_members_when_read():
    for data in FRAMEWORKS:
        class Stream(data.IterableDataset):
            def __init__(self, items):
                self.items = items

            def __iter__(self):
                return iter(self.items)

            def __len__(self):
                return len(self.items)

        chain = data.ChainDataset([Stream([1, 2]), Stream([]), Stream([3])])
        assert list(chain) == [1, 2, 3] and len(chain) == 3
        assert [b.tolist() for b in data.DataLoader(chain, batch_size=2)] == [[1, 2], [3]]
        mixed = data.ChainDataset([Stream([1]), [2, 3]])  # built without complaint
        with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
            list(mixed)
        with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
            len(mixed)


def test_stack_tuple_and_dict_samples_and_batches_equal_torchs():
    for make in (lambda data: data.StackDataset([1, 2, 3], ["a", "b", "c"]),
                 lambda data: data.StackDataset(x=np.eye(3, dtype=np.float32), y=[7, 8, 9])):
        ours, theirs = (make(data) for data in FRAMEWORKS)
        assert len(ours) == len(theirs) == 3
        assert [plain(ours[i]) for i in range(3)] == [plain(theirs[i]) for i in range(3)]
        batches = [[plain(b) for b in data.DataLoader(stack, batch_size=2)]
                   for data, stack in zip(FRAMEWORKS, (ours, theirs))]
        assert batches[0] == batches[1]


@pytest.mark.parametrize("args, kwargs, message", [
    (([1], [2]), dict(z=[3]), "both"),
    ((), {}, "At least one dataset should be passed"),
    (([1, 2], [3]), {}, "Size mismatch between datasets"),
    ((), dict(a=[1], b=[]), "Size mismatch between datasets"),
])
def test_stack_errors_are_torchs(args, kwargs, message):
    for data in FRAMEWORKS:
        with pytest.raises(ValueError, match=message):
            data.StackDataset(*args, **kwargs)


class _BatchReader:
    """Reads whole batches through __getitems__, recording each call."""

    def __init__(self, n):
        self.n, self.calls = n, []

    def __getitem__(self, index):
        return index * 10

    def __getitems__(self, indices):
        self.calls.append(list(indices))
        return [index * 10 + 1 for index in indices]  # distinguishable from __getitem__'s

    def __len__(self):
        return self.n


def test_batches_are_read_through_getitems_as_torch_reads_them():
    for make in (lambda data, reader: reader,
                 lambda data, reader: data.Subset(reader, [5, 3, 1, 0]),
                 lambda data, reader: data.StackDataset(reader, list(range(6))),
                 lambda data, reader: data.StackDataset(a=reader, b=list(range(6)))):
        results = []
        for data in FRAMEWORKS:
            reader = _BatchReader(6)
            loader = data.DataLoader(make(data, reader), batch_size=3)
            results.append(([plain(batch) for batch in loader], reader.calls))
        assert results[0] == results[1] and results[0][1]


def test_a_subset_overriding_only_getitem_is_torchs_error():
    for data in FRAMEWORKS:
        class Doubled(data.Subset):
            def __getitem__(self, index):
                return 2 * super().__getitem__(index)

        with pytest.raises(NotImplementedError, match="overrides __getitem__ but not __getitems__"):
            Doubled([1, 2, 3], [0, 1])


def test_a_nested_getitems_of_the_wrong_size_is_torchs_error():
    class Short(_BatchReader):
        def __getitems__(self, indices):
            return [0]

    for data in FRAMEWORKS:
        with pytest.raises(ValueError, match="Nested dataset's output size mismatch"):
            data.StackDataset(Short(4), [1, 2, 3, 4]).__getitems__([0, 1])
