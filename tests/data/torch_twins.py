"""What the data tests need to hold mpigrad against torch: `plain`, a batch in
framework-neutral form, and iterable datasets written once and built on both
frameworks' IterableDataset (mpigrad's in range_streams.py, which spawned workers import
without torch), so one stream is read through both DataLoaders. It is an importable module
because spawned workers unpickle the datasets by module name."""
import numpy as np
import torch
import torch.utils.data as torch_data

import mpigrad
from range_streams import (  # noqa: F401  (the mpigrad twins, found here by name)
    MpigradRangeStream, MpigradSizedStream, RangeStream, mpigrad_take_share, take_share)


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


def torch_take_share(worker_id):
    take_share(torch_data.get_worker_info())


class TorchRangeStream(RangeStream, torch_data.IterableDataset):
    data = torch_data


class TorchSizedStream(TorchRangeStream):
    def __len__(self):
        return self.stop - self.start
