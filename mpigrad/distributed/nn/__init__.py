"""Differentiable collectives at torch's paths: `mpigrad.distributed.nn.all_gather` and
`mpigrad.distributed.nn.functional.all_gather` are the same function, as in torch. Their
gradient convention is stated once, in functional.py."""
from .functional import (all_gather, all_reduce, all_to_all, broadcast, recv,  # noqa: F401
                         reduce, reduce_scatter, send)
