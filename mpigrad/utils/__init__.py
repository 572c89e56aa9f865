"""Utilities, at torch.utils' paths: `checkpoint` (activation checkpointing, a module as in
torch) and `data` (torch.utils.data's path to mpigrad.data)."""
from . import checkpoint, data  # noqa: F401
