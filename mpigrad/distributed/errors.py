"""Errors raised by the communication layer.

`torch.distributed` reports backend failures as `RuntimeError` subclasses; these follow suit so
code that catches `RuntimeError` around a collective keeps working.
"""


class DistError(RuntimeError):
    """Base class of the errors mpigrad.distributed raises itself."""


class CollectiveMismatchError(DistError):
    """Ranks called a collective with different operations, shapes, dtypes, roots or ops.

    Raised on every rank of the group, with the same message, before any data moves.
    """


class MessageMismatchError(DistError):
    """A point-to-point message did not have the size the receive buffer expected."""
