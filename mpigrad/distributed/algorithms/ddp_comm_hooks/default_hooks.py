"""The plain hooks: allreduce_hook (DDP's default), fp16_compress_hook, bf16_compress_hook.

The compressing hooks send each gradient as 16 bits (half the bytes of float32) and sum what
they receive in float32, never in 16 bits (see compression.py for the encodings and the
ring that carries them):

  fp16_compress_hook  float16 after scaling the bucket by a power of two into float16's
                      normal range (so small gradients keep their precision and convert fast)
  bf16_compress_hook  bfloat16: float32's upper 16 bits, rounded to nearest even; works on
                      CPU (PyTorch's refuses to run on its CPU build)

hierarchical_allreduce_hook (with HierarchicalState) forces the hierarchical allreduce that
DDP's default picks by itself when ranks share hosts (see distributed/hierarchical.py);
flat_allreduce_hook forces the single Iallreduce; ring_allreduce_hook uses mpigrad's own
ring of nonblocking point-to-point messages instead.
"""
from ...comm_hook import allreduce_hook, flat_allreduce_hook
from ...hierarchical import Hierarchy
from .compression import BFLOAT16, FLOAT16, compressed_allreduce, ring_allreduce

__all__ = ["allreduce_hook", "flat_allreduce_hook", "ring_allreduce_hook", "fp16_compress_hook",
           "bf16_compress_hook", "HierarchicalState", "hierarchical_allreduce_hook"]


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
    time both; None: $MPIGRAD_CROSS_HOST_ALLREDUCE, else 'auto'; see hierarchical.py)."""

    def __init__(self, ranks_per_host=None, across_hosts=None):
        self.ranks_per_host = ranks_per_host
        self.across_hosts = across_hosts
        self.hierarchy = None


def hierarchical_allreduce_hook(state, bucket):
    """Sum the bucket inside each host, across hosts, then back (see hierarchical.py), even
    when DDP would not choose it. The hosts are found at the first call (collectively)."""
    if state.hierarchy is None:
        state.hierarchy = Hierarchy(bucket.comm, bucket.process_group, state.ranks_per_host,
                                    across_hosts=state.across_hosts)
    return state.hierarchy.allreduce(bucket, "hierarchical_allreduce_hook")
