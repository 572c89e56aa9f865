"""Algorithms built on DistributedDataParallel: comm hooks (ddp_comm_hooks) and Join (join).

This package depends on DDP (distributed/ddp.py, reducer.py, comm_hook.py, joinable.py),
never the other way round.
"""
from . import ddp_comm_hooks
from .join import Join, JoinHook, Joinable

__all__ = ["Join", "JoinHook", "Joinable", "ddp_comm_hooks"]
