"""Hierarchical allreduce: inside each host over shared memory, across hosts by one rank each.

With several ranks per host, a flat allreduce sends every rank's data over the network.
Here a bucket goes in three rounds:

  1. reduce to the host's first rank (MPI_Reduce on the ranks of the host: shared memory),
  2. allreduce among the hosts' first ranks (the only round that crosses the network, with
     one rank per host, so the network carries what one rank per host would send),
  3. broadcast from the host's first rank to the others on the host.

Hosts are the groups of `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` (whether there are
several, each with several ranks, is first decided from the hosts' names, which needs no
communicator); `ranks_per_host=k` groups ranks 0..k-1, k..2k-1, ... instead, to try the
algorithm on one machine.
DistributedDataParallel's default reduction uses it when the ranks share hosts (more than
one host, and more than one rank on some host); `hierarchical_allreduce_hook` forces it.

Rounds 1 and 3 use two communicators over the same host ranks, round 2 a third, so that
every communicator sees the buckets' collectives in bucket order (see rounds.py). Sums are
taken in another order than a flat allreduce's, so results may differ in the last bits, but
every rank gets the same bits (round 3 copies them).
"""
import weakref
from collections import Counter

from mpi4py import MPI

from .buffers import mpi_float_type
from .process_group import duplicate, free_communicators
from .rounds import rounds
from .watchdog import blocked

__all__ = ["Hierarchy"]


class Hierarchy:
    """The hosts of communicator `comm` (collective: every rank of `comm` builds it at the
    same point). `spans_shared_hosts`: more than one host and more than one rank on some,
    hosts told apart by their names (MPI_Get_processor_name). With `only_if_useful`, the
    communicators of the three rounds (the host's from MPI_Comm_split_type(SHARED)) are made
    only when `spans_shared_hosts`: every DDP model asks, and MPI allows a few thousand
    communicators per process."""

    def __init__(self, comm, process_group, ranks_per_host=None, only_if_useful=False):
        if ranks_per_host is not None and not (isinstance(ranks_per_host, int)
                                               and ranks_per_host >= 1):
            raise ValueError(f"ranks_per_host must be a positive int or None, got "
                             f"{ranks_per_host!r}")
        rank, size = comm.Get_rank(), comm.Get_size()
        what = "DistributedDataParallel's hierarchical allreduce"
        with blocked(process_group, "finding which ranks share a host"):
            if ranks_per_host is None:
                # Decided from the host names, which costs no communicator: only a layout that
                # will be used gets its communicators.
                names = comm.allgather(MPI.Get_processor_name())
                self.host_sizes = list(Counter(names).values())
            else:
                self.host_sizes = [min(ranks_per_host, size - first)
                                   for first in range(0, size, ranks_per_host)]
            self.spans_shared_hosts = len(self.host_sizes) > 1 and max(self.host_sizes) > 1
            if only_if_useful and not self.spans_shared_hosts:
                self.host_reduce = self.host_broadcast = self.across = None
                return
            if ranks_per_host is None:
                host = duplicate(comm, what,
                                 lambda: comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank))
            else:
                host = duplicate(comm, what, lambda: comm.Split(rank // ranks_per_host, rank))
            first = host.Get_rank() == 0
            self.host_reduce = host
            self.host_broadcast = duplicate(host, what)
            self.across = duplicate(comm, what,
                                    lambda: comm.Split(0 if first else MPI.UNDEFINED, rank))
        # Freed when this hierarchy is collected (with its DDP channel or hook state).
        weakref.finalize(self, free_communicators, self.communicators())

    def communicators(self):
        """The communicators this hierarchy made (it frees them when collected)."""
        comms = [self.host_reduce, self.host_broadcast, self.across]
        return [c for c in comms if c is not None and c != MPI.COMM_NULL]

    def allreduce(self, bucket, what="hierarchical allreduce"):
        """The Future of the bucket's sum over all ranks, in the three rounds above."""
        return rounds(bucket, what, self._rounds(bucket.buffer()))

    def _rounds(self, buf):
        datatype = mpi_float_type(buf.dtype)
        first = self.host_reduce.Get_rank() == 0
        if self.host_reduce.Get_size() > 1:
            send = MPI.IN_PLACE if first else [buf, datatype]
            receive = [buf, datatype] if first else None
            yield [self.host_reduce.Ireduce(send, receive, MPI.SUM, root=0)]
        else:
            yield []
        if first and self.across.Get_size() > 1:
            yield [self.across.Iallreduce(MPI.IN_PLACE, [buf, datatype], MPI.SUM)]
        else:
            yield []
        if self.host_broadcast.Get_size() > 1:
            yield [self.host_broadcast.Ibcast([buf, datatype], root=0)]
        return buf
