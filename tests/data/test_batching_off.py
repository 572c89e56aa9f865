"""DataLoader(batch_size=None): the sampler's indices one at a time, each sample through
default_convert (or the collate_fn given), against torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as torch_data  # noqa: E402
from torch_twins import plain  # noqa: E402  (tests/data/conftest.py puts it on the path)

import mpigrad.utils.data as mpigrad_data  # noqa: E402

FRAMEWORKS = [mpigrad_data, torch_data]


class RowBlocks:
    """Indexed by a list of row numbers, as a dataset read a whole batch at a time is."""

    def __init__(self, n):
        self.rows = np.arange(n * 2, dtype=np.float32).reshape(n, 2)

    def __getitem__(self, rows):
        return {"x": self.rows[rows], "index": np.asarray(rows), "tag": "block"}

    def __len__(self):
        return len(self.rows)


def _samples():
    return [{"x": np.full(2, i, np.float32), "y": i, "name": f"s{i}", "pair": (i, float(i))}
            for i in range(5)]


def _both(make_dataset, **kwargs):
    loaders = [data.DataLoader(make_dataset(), batch_size=None, **kwargs) for data in FRAMEWORKS]
    return [[plain(sample) for sample in loader] for loader in loaders], loaders


@pytest.mark.parametrize("num_workers", [0, 2])
def test_samples_come_converted_not_batched_as_torchs(num_workers):
    (ours, theirs), loaders = _both(_samples, num_workers=num_workers)
    assert ours == theirs and len(ours) == 5
    assert len(loaders[0]) == len(loaders[1]) == 5


def test_a_sampler_of_index_lists_reads_whole_blocks_as_torchs():
    for_each = [data.BatchSampler(data.SequentialSampler(range(10)), 4, drop_last=False)
                for data in FRAMEWORKS]
    batches = []
    for data, sampler in zip(FRAMEWORKS, for_each):
        loader = data.DataLoader(RowBlocks(10), batch_size=None, sampler=sampler)
        assert len(loader) == 3
        batches.append([plain(batch) for batch in loader])
    assert batches[0] == batches[1]


def test_shuffled_samples_are_each_read_once():
    loader = mpigrad_data.DataLoader(_samples(), batch_size=None, shuffle=True)
    assert sorted(sample["y"] for sample in loader) == list(range(5))


def test_a_collate_fn_sees_single_samples():
    for data in FRAMEWORKS:
        loader = data.DataLoader(_samples(), batch_size=None, collate_fn=lambda s: s["name"])
        assert list(loader) == [f"s{i}" for i in range(5)]


def test_drop_last_without_batches_is_torchs_error():
    for data in FRAMEWORKS:
        with pytest.raises(ValueError, match="batch_size=None option disables auto-batching"):
            data.DataLoader(_samples(), batch_size=None, drop_last=True)
