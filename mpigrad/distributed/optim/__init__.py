"""Optimizers for model-parallel and sharded training: DistributedOptimizer."""
from .distributed_optimizer import DistributedOptimizer

__all__ = ["DistributedOptimizer"]
