"""Algorithms built on DistributedDataParallel: comm hooks (ddp_comm_hooks) and Join (join)."""
from .join import Join, JoinHook, Joinable  # noqa: F401
from . import ddp_comm_hooks  # noqa: F401
