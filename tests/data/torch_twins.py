"""What the data tests need to hold mpigrad against torch: `plain`, a batch in
framework-neutral form, and iterable datasets written once and built on both
frameworks' IterableDataset, so one stream is read through both DataLoaders. It is an
importable module because spawned workers unpickle the datasets by module name."""
import numpy as np
import torch
import torch.utils.data as torch_data

import mpigrad
import mpigrad.utils.data as mpigrad_data


def plain(value):
    """`value` with every Tensor (either framework's) as ("tensor", dtype name, values) and
    containers as (type name, contents), so equal batches compare equal."""
    if isinstance(value, (torch.Tensor, mpigrad.Tensor)):
        return ("tensor", str(value.dtype).split(".")[-1], value.tolist())
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return (type(value).__name__, {key: plain(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [plain(item) for item in value])
    return (type(value).__name__, value)


def _take_share(info):
    """Torch's second documented way to split a stream: worker_init_fn narrows the
    worker's copy of the dataset (`info.dataset`) to its share."""
    dataset = info.dataset
    share = -(-(dataset.stop - dataset.start) // info.num_workers)
    dataset.start += info.id * share
    dataset.stop = min(dataset.start + share, dataset.stop)


def mpigrad_take_share(worker_id):
    _take_share(mpigrad_data.get_worker_info())


def torch_take_share(worker_id):
    _take_share(torch_data.get_worker_info())


class _RangeStream:
    """Samples `(i, float(i) / 2)` for i in [start, stop); with `split`, each worker of a
    DataLoader reads its own contiguous share, as torch's documentation shows."""

    def __init__(self, start, stop, split=True, numpy_samples=False):
        self.start, self.stop, self.split, self.numpy_samples = start, stop, split, numpy_samples

    def __iter__(self):
        start, stop = self.start, self.stop
        info = self.data.get_worker_info()
        if self.split and info is not None:
            share = -(-(stop - start) // info.num_workers)
            start = self.start + info.id * share
            stop = min(start + share, self.stop)
        for i in range(start, stop):
            yield (np.int64(i), np.float32(i) / 2) if self.numpy_samples else (i, i / 2)


class MpigradRangeStream(_RangeStream, mpigrad_data.IterableDataset):
    data = mpigrad_data


class TorchRangeStream(_RangeStream, torch_data.IterableDataset):
    data = torch_data


class MpigradSizedStream(MpigradRangeStream):
    def __len__(self):
        return self.stop - self.start


class TorchSizedStream(TorchRangeStream):
    def __len__(self):
        return self.stop - self.start
