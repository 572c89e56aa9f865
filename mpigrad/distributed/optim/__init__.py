"""Optimizers for model-parallel and sharded training: DistributedOptimizer (RPC) and
ZeroRedundancyOptimizer (optimizer state sharded across a process group)."""
from .distributed_optimizer import DistributedOptimizer
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["DistributedOptimizer", "ZeroRedundancyOptimizer"]
