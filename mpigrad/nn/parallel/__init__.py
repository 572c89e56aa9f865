"""Data parallelism, with torch.nn.parallel's name for it."""
from ...distributed.ddp.wrapper import DistributedDataParallel  # noqa: F401

__all__ = ["DistributedDataParallel"]
