"""The plain hooks: allreduce_hook, hierarchical_allreduce_hook (DDP's default, with the state DDP
makes), fp16_compress_hook, bf16_compress_hook.

The compressing hooks send each gradient as 16 bits (half the bytes of float32) and sum what
they receive in float32, never in 16 bits (see compression.py for the encodings and the
ring that carries them):

  fp16_compress_hook  float16 after scaling the bucket by a power of two into float16's
                      normal range (so small gradients keep their precision and convert fast)
  bf16_compress_hook  bfloat16: float32's upper 16 bits, rounded to nearest even; works on
                      CPU (PyTorch's refuses to run on its CPU build)

allreduce_hook is one Iallreduce of the bucket, whatever the hosts. hierarchical_allreduce_hook
sums inside each host, then across hosts (hierarchical.py); DDP registers it by default with
`HierarchicalState(only_if_useful=True)`, which sums in shared memory when DDP put the
buckets there (ranks sharing hosts, the same number on each; shared_memory.py), else takes
the hierarchical path when ranks share hosts (more than one host, more than one rank on
some) or the ring beat the library's allreduce between hosts, and otherwise makes the single
Iallreduce of allreduce_hook.
ring_allreduce_hook uses mpigrad's own ring of nonblocking point-to-point messages instead.
"""
from mpi4py import MPI

from ...buffers import mpi_float_type
from .hierarchical import Hierarchy
from .shared_memory import shared_memory_allreduce
from .compression import BFLOAT16, FLOAT16, compressed_allreduce, ring_allreduce

__all__ = ["allreduce_hook", "ring_allreduce_hook", "fp16_compress_hook", "bf16_compress_hook",
           "HierarchicalState", "hierarchical_allreduce_hook"]


def allreduce_hook(state, bucket):
    """One Iallreduce(SUM) of the (pre-divided) buffer in place. `state` is unused."""
    buf = bucket.buffer()
    request = bucket.comm.Iallreduce(MPI.IN_PLACE, [buf, mpi_float_type(buf.dtype)], MPI.SUM)
    return bucket.future("allreduce_hook", [request], lambda: buf)


def ring_allreduce_hook(state, bucket):
    """Sum the bucket with mpigrad's own ring of nonblocking messages instead of the MPI
    library's Iallreduce (bandwidth-optimal whatever the library does on a slow link).
    `state` is unused."""
    return ring_allreduce(bucket)


def fp16_compress_hook(state, bucket):
    """Send the bucket as (scaled) float16, sum in float32. `state` is unused."""
    return compressed_allreduce(bucket, FLOAT16)


def bf16_compress_hook(state, bucket):
    """Send the bucket as bfloat16, sum in float32. `state` is unused."""
    return compressed_allreduce(bucket, BFLOAT16)


class HierarchicalState:
    """State of `hierarchical_allreduce_hook`: how ranks are grouped into hosts (None: by
    shared memory, `MPI_Comm_split_type(SHARED)`; k: ranks 0..k-1, k..2k-1, ...), and how
    the hosts' first ranks sum across hosts (`across_hosts`: 'mpi', 'ring', or 'auto' to
    time both; None: $MPIGRAD_CROSS_HOST_ALLREDUCE, else 'auto'; see hierarchical.py).
    With `only_if_useful` (DDP's default state) the hook makes allreduce_hook's single
    Iallreduce unless the hierarchy pays (see the module docstring), and the hierarchy's
    communicators are made only then.

    The hosts are found (collectively) by `build(comm, process_group)`: DDP calls it when it
    makes its default state, with the host names it already gathered; a state a user
    registers is built at the hook's first call."""

    def __init__(self, ranks_per_host=None, across_hosts=None, only_if_useful=False):
        self.ranks_per_host = ranks_per_host
        self.across_hosts = across_hosts
        self.only_if_useful = only_if_useful
        self.hierarchy = None

    def build(self, comm, process_group, host_names=None):
        self.hierarchy = Hierarchy(comm, process_group, self.ranks_per_host,
                                   only_if_useful=self.only_if_useful,
                                   across_hosts=self.across_hosts, names=host_names)

    def pays(self):
        return self.hierarchy.spans_shared_hosts or self.hierarchy.ring_across_hosts


def hierarchical_allreduce_hook(state, bucket):
    """Sum the bucket inside each host, across hosts, then back (see hierarchical.py); with
    `state.only_if_useful`, only where that pays (else one Iallreduce), and in the shared
    buckets when DDP made them (shared_memory.py)."""
    if state.only_if_useful and bucket.shared is not None:
        return shared_memory_allreduce(bucket.shared, bucket)
    if state.hierarchy is None:
        state.build(bucket.comm, bucket.process_group)
    if state.only_if_useful and not state.pays():
        return allreduce_hook(None, bucket)
    return state.hierarchy.allreduce(bucket, "hierarchical_allreduce_hook")
