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

Across hosts the MPI library's allreduce is not always the fast one: Open MPI's over TCP
moved half of what a 1 Gbit/s link carries, where mpigrad's ring of point-to-point messages
(ring.py) filled it. So when ranks span hosts, the ranks that talk across them time both
once, on a 4 MiB buffer (the library's nonblocking Iallreduce, which DDP calls, and which
in Open MPI runs another algorithm than its blocking Allreduce), and take the ring only if
it was clearly faster (below 0.8 of the library's time, on the slowest rank). `MPIGRAD_CROSS_HOST_ALLREDUCE=mpi|ring` (or
`across_hosts=`) decides without timing; it must say the same on every rank. Round 2, or for
one rank per host DDP's whole reduction, then goes round that ring.
"""
import os
import time
import weakref
from collections import Counter

import numpy as np
from mpi4py import MPI

from ...buffers import mpi_float_type
from ...process_group import Communicators, duplicate
from ...ring import ring_all_reduce, ring_rounds
from .rounds import rounds
from ...fault.watchdog import blocked

__all__ = ["Hierarchy", "CROSS_HOST_ENV", "cross_host_algorithm", "host_names", "across_hosts"]

CROSS_HOST_ENV = "MPIGRAD_CROSS_HOST_ALLREDUCE"
_CHOICES = ("auto", "mpi", "ring")
# Large enough to be bandwidth-bound on any network, small enough to cost about half a second
# on a 1 Gbit/s link for the eight reductions of the timing.
_PROBE_ELEMENTS = 1 << 20
_PROBE_REPEATS = 3
_RING_MUST_TAKE = 0.8  # of the library's time: the library is kept on a near tie


def cross_host_algorithm(comm, choice=None):
    """'ring' or 'mpi': which allreduce DDP runs over `comm`, whose ranks are on different
    hosts (collective). `choice` (default: $MPIGRAD_CROSS_HOST_ALLREDUCE, else 'auto')
    'auto' times both on a 4 MiB buffer."""
    choice = choice if choice is not None else os.environ.get(CROSS_HOST_ENV, "auto")
    said = comm.allgather(choice)
    if len(set(said)) > 1:
        raise ValueError(f"the cross-host allreduce must be chosen alike on every rank; "
                         f"ranks said {said} ({CROSS_HOST_ENV} or across_hosts=)")
    if choice not in _CHOICES:
        raise ValueError(f"{CROSS_HOST_ENV} (or across_hosts=) must be one of {_CHOICES}, "
                         f"got {choice!r}")
    if choice != "auto" or comm.Get_size() == 1:
        return "mpi" if choice == "auto" else choice
    buf = np.zeros(_PROBE_ELEMENTS, np.float32)
    seconds = np.zeros(2)
    # The nonblocking call, as DDP makes it: Open MPI's Iallreduce (libnbc) runs another
    # algorithm than its blocking Allreduce, and over TCP a much slower one.
    runs = (lambda: comm.Iallreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], MPI.SUM).Wait(),
            lambda: ring_all_reduce(buf, MPI.SUM, comm))
    for k, run in enumerate(runs):
        run()  # the first exchange may open connections
        start = time.perf_counter()
        for _ in range(_PROBE_REPEATS):
            run()
        seconds[k] = time.perf_counter() - start
    comm.Allreduce(MPI.IN_PLACE, seconds, MPI.MAX)
    return "ring" if seconds[1] < _RING_MUST_TAKE * seconds[0] else "mpi"


def host_names(comm):
    """Every rank's host name (MPI_Get_processor_name), in rank order (collective)."""
    return comm.allgather(MPI.Get_processor_name())


def across_hosts(comm, buf, ring, tag):
    """Sum `buf` over `comm`, whose ranks are on different hosts, as rounds (see rounds.py):
    round `ring` of point-to-point messages, told apart from other buckets' by `tag`, or the
    library's Iallreduce."""
    if ring:
        return (yield from ring_rounds(comm, buf, MPI.SUM, tag=tag))
    yield [comm.Iallreduce(MPI.IN_PLACE, [buf, mpi_float_type(buf.dtype)], MPI.SUM)]
    return buf


class Hierarchy:
    """The hosts of communicator `comm` (collective: every rank of `comm` builds it at the
    same point). `spans_shared_hosts`: more than one host and more than one rank on some,
    hosts told apart by their names (MPI_Get_processor_name). With `only_if_useful`, the
    communicators of the three rounds (the host's from MPI_Comm_split_type(SHARED)) are made
    only when `spans_shared_hosts`: every DDP model asks, and MPI allows a few thousand
    communicators per process."""

    def __init__(self, comm, process_group, ranks_per_host=None, only_if_useful=False,
                 across_hosts=None, names=None):
        if ranks_per_host is not None and not (isinstance(ranks_per_host, int)
                                               and ranks_per_host >= 1):
            raise ValueError(f"ranks_per_host must be a positive int or None, got "
                             f"{ranks_per_host!r}")
        rank, size = comm.Get_rank(), comm.Get_size()
        self.comm = comm
        self.ring_across_hosts = False
        what = "DistributedDataParallel's hierarchical allreduce"
        with blocked(process_group, "finding which ranks share a host"):
            if ranks_per_host is None:
                # Decided from the host names, which costs no communicator: only a layout that
                # will be used gets its communicators. `names`: host_names(comm) already known.
                self.host_names = host_names(comm) if names is None else names
            else:
                self.host_names = [f"host {r // ranks_per_host}" for r in range(size)]
            self.host_sizes = list(Counter(self.host_names).values())
            self.spans_shared_hosts = len(self.host_sizes) > 1 and max(self.host_sizes) > 1
            if only_if_useful and not self.spans_shared_hosts:
                self.host_reduce = self.host_broadcast = self.across = None
                if len(self.host_sizes) > 1:  # one rank per host: every rank talks across
                    self.ring_across_hosts = cross_host_algorithm(comm, across_hosts) == "ring"
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
            # Released when this hierarchy is collected (with its DDP channel or hook state, or
            # at once if the choice below raises), freed at an agreement of the group's.
            weakref.finalize(self, Communicators(process_group, self.communicators()).release)
            if first and self.across.Get_size() > 1:
                self.ring_across_hosts = cross_host_algorithm(self.across, across_hosts) == "ring"

    def communicators(self):
        """The communicators this hierarchy made (released when it is collected)."""
        comms = [self.host_reduce, self.host_broadcast, self.across]
        return [c for c in comms if c is not None and c != MPI.COMM_NULL]

    def allreduce(self, bucket, what="hierarchical allreduce"):
        """The Future of the bucket's sum over all ranks, in the three rounds above (with one
        rank per host and nothing made, only round 2, on `comm`)."""
        if self.host_reduce is None:
            return rounds(bucket, what, self._across(self.comm, bucket.buffer(), bucket.index()))
        return rounds(bucket, what, self._rounds(bucket.buffer(), bucket.index()))

    def _across(self, comm, buf, tag):
        return (yield from across_hosts(comm, buf, self.ring_across_hosts, tag))

    def _rounds(self, buf, tag):
        datatype = mpi_float_type(buf.dtype)
        first = self.host_reduce.Get_rank() == 0
        if self.host_reduce.Get_size() > 1:
            send = MPI.IN_PLACE if first else [buf, datatype]
            receive = [buf, datatype] if first else None
            yield [self.host_reduce.Ireduce(send, receive, MPI.SUM, root=0)]
        else:
            yield []
        if first and self.across.Get_size() > 1:
            yield from self._across(self.across, buf, tag)
        else:
            yield []
        if self.host_broadcast.Get_size() > 1:
            yield [self.host_broadcast.Ibcast([buf, datatype], root=0)]
        return buf
