"""`torch.utils.data.distributed`'s path to `mpigrad.data.DistributedSampler`."""
from mpigrad.data.distributed import DistributedSampler  # noqa: F401

__all__ = ["DistributedSampler"]
