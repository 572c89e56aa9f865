"""Utilities: activation checkpointing."""
from .checkpoint import checkpoint, checkpoint_sequential  # noqa: F401
