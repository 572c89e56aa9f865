"""Utilities: activation checkpointing, and `data` (torch.utils.data's path to mpigrad.data)."""
from .checkpoint import checkpoint, checkpoint_sequential  # noqa: F401
from . import data  # noqa: F401
