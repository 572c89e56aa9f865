"""`torch.utils.data`'s path to mpigrad's data package: the same objects as `mpigrad.data`."""
from mpigrad.data import *  # noqa: F401,F403
from mpigrad.data import __all__  # noqa: F401
from mpigrad.data import DistributedSampler, get_worker_info, random_split  # noqa: F401
from . import dataloader, dataset, distributed, sampler  # noqa: F401
