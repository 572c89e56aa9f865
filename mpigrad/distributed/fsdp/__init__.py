"""mpigrad.distributed.fsdp: fully sharded data parallelism, torch.distributed.fsdp's names.

- `fully_shard` (FSDP2; fully_shard.py): shard a module's parameters over a mesh, per block and
  at the root; `FSDPModule`; `MixedPrecisionPolicy`, `OffloadPolicy`, `CPUOffloadPolicy`.
- `FullyShardedDataParallel` (FSDP1; fully_sharded_data_parallel.py) with `ShardingStrategy`
  and the auto-wrap policies of `fsdp.wrap`, on the same machinery.
- shards are `ShardParameter`s (_norm.py), for which mpigrad.nn.utils.clip_grad_norm_ gives
  the full model's gradient norm.

The machinery: `_unit.py` (one unit's flat shards, all-gather and reduce-scatter), `_state.py`
(the hooks and the iteration the root drives), `_comm.py` (FSDP's communicators, under the
watchdog). State dicts: mpigrad.distributed.checkpoint.state_dict. docs/fsdp.md has the user's
view and the memory per rank.
"""
from .api import (BackwardPrefetch, CPUOffload, CPUOffloadPolicy, MixedPrecision,
                  MixedPrecisionPolicy, OffloadPolicy, ShardingStrategy)
from .fully_shard import FSDPModule, fully_shard
from .fully_sharded_data_parallel import FullyShardedDataParallel

__all__ = ["fully_shard", "FSDPModule", "MixedPrecisionPolicy", "OffloadPolicy",
           "CPUOffloadPolicy", "ShardingStrategy", "BackwardPrefetch", "CPUOffload",
           "MixedPrecision", "FullyShardedDataParallel"]
