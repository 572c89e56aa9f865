"""Utilities: activation checkpointing."""
from .checkpoint import checkpoint  # noqa: F401
