"""Algorithms DistributedDataParallel builds on, at PyTorch's paths: the comm hooks
(`ddp_comm_hooks`: the default hooks, PowerSGD, top-k, ZeRO's, the hierarchical allreduce and
the driver of hooks that reduce in several rounds) and Join (`join`, with Joinable, which DDP
is). They work on a bucket's arrays and the communicators the GradBucket hands them; nothing
here imports DDP (distributed/ddp/), which imports this package.
"""
from . import ddp_comm_hooks
from .join import Join, JoinHook, Joinable

__all__ = ["Join", "JoinHook", "Joinable", "ddp_comm_hooks"]
