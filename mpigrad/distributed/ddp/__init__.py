"""DistributedDataParallel and the machinery under it.

- `wrapper`: `DistributedDataParallel`, the thin Module a user wraps a model in (torch's
  `mpigrad.nn.parallel.DistributedDataParallel` is this class).
- `reducer`: the Reducer, which buckets gradients, launches each bucket's comm hook from the
  gradient hooks while backward runs, and finishes every bucket before the optimizer step;
  its lifecycle is written at the top of the module.
- `channel`: DDP's own communicators and every blocking wait of DDP's, under the watchdog.
- `bucket`: `GradBucket`, what a comm hook is given, and the hook contract.
- `timeline`: a Chrome-trace timeline of each bucket's reduction.

The comm hooks themselves and Join are in `distributed.algorithms`, at PyTorch's paths.
"""
from .wrapper import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
