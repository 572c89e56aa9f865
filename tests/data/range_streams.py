"""The data tests' iterable datasets, written once (torch_twins builds them on torch's
IterableDataset too), and built here on mpigrad's in a module that does not import torch:
spawned DataLoader workers (mpigrad's start method once the process has initialised MPI, as
a test session that started a process group has) import the module a dataset comes from,
and importing torch would cost each about 2 s."""
import numpy as np

import mpigrad.utils.data as mpigrad_data


def take_share(info):
    """Torch's second documented way to split a stream: worker_init_fn narrows the
    worker's copy of the dataset (`info.dataset`) to its share."""
    dataset = info.dataset
    share = -(-(dataset.stop - dataset.start) // info.num_workers)
    dataset.start += info.id * share
    dataset.stop = min(dataset.start + share, dataset.stop)


def mpigrad_take_share(worker_id):
    take_share(mpigrad_data.get_worker_info())


class RangeStream:
    """Samples `(i, float(i) / 2)` for i in [start, stop); with `split`, each worker of a
    DataLoader reads its own contiguous share, as torch's documentation shows. A subclass
    sets `data`, its framework's data module."""

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


class MpigradRangeStream(RangeStream, mpigrad_data.IterableDataset):
    data = mpigrad_data


class MpigradSizedStream(MpigradRangeStream):
    def __len__(self):
        return self.stop - self.start
