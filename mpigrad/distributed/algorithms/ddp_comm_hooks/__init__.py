"""Communication hooks for DistributedDataParallel, with PyTorch's module paths.

    from mpigrad.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)

The contract a hook follows (`GradBucket`, what its Future must hold) is in
`mpigrad.distributed.ddp.bucket`, beside the Reducer that calls it.

- `default_hooks`: allreduce_hook (one Iallreduce), hierarchical_allreduce_hook with
  HierarchicalState (DDP's default, with a state that goes hierarchical only where ranks
  share hosts; see `hierarchical`), fp16_compress_hook, bf16_compress_hook (both: 16 bits on
  the wire, summed in float32; see `compression`).
- `hierarchical`: the allreduce inside hosts, across hosts, and back; `rounds`: the Future
  of a hook that reduces in several rounds of messages.
- `shared_memory`: when every rank is on one host, DDP's buckets live in memory the ranks
  share and the default hook sums them there, each rank a slice, with no MPI message.
- `powerSGD_hook`: powerSGD_hook with PowerSGDState, low-rank compression with error feedback
  (the module; as in PyTorch, the function is `powerSGD_hook.powerSGD_hook`).
- `topk_hooks`: topk_hook with TopKState, top-k sparsification with error feedback.

The hooks and their states are also importable from this package itself.
"""
from . import default_hooks, powerSGD_hook, topk_hooks
from .default_hooks import (HierarchicalState, allreduce_hook, bf16_compress_hook,
                            fp16_compress_hook, hierarchical_allreduce_hook)
from .powerSGD_hook import PowerSGDState
from .topk_hooks import TopKState, topk_hook

__all__ = ["allreduce_hook", "fp16_compress_hook", "bf16_compress_hook", "HierarchicalState",
           "hierarchical_allreduce_hook", "PowerSGDState", "TopKState", "topk_hook",
           "default_hooks", "powerSGD_hook", "topk_hooks"]
