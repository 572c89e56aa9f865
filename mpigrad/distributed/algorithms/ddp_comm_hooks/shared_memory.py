"""Averaging gradient buckets in memory that the ranks of one host share.

Between the ranks of one host, MPI's allreduce is the wrong tool: it moves each bucket
through its shared-memory channel (copies in, copies out, twice over for a reduce-scatter and
an allgather) on cores that are all busy with backward, and on the 2-core development machine
that was 3-4 ms of a 17 ms step (docs/benchmarks.md). Here the buckets themselves live in
shared memory instead:

  - `SharedBuckets` is one segment per DDP model, a region per rank, each region laid out
    like the others: a row of flags, then every bucket at the same offset. The Reducer takes
    its bucket storage from it (`storage`), so the division by the world size that every
    gradient goes through already writes it where the other ranks can read it, and `.grad`
    is left a view of the rank's own region afterwards (as with gradient_as_bucket_view), so
    nothing is copied back.
  - `shared_memory_allreduce(bucket)` is the reduction of one bucket, a Future in two phases.
    Each rank raises its `ready` flag for the bucket. Once every rank's flag is up, rank r sums
    slice r of the bucket over every region (own region first, then the others in rank order)
    and writes the sum into every region: the slices are disjoint, so no two ranks write the
    same bytes, and every rank ends with the same bits. Then it raises its `summed` flag; once
    every rank's is up, the bucket is reduced everywhere. Per rank, that is one pass over
    1/N of each region to read, and N passes over 1/N to write: for two ranks, 1.5x the
    bucket's bytes, where MPI's allreduce moved about five times them.
  - With several hosts (each with the same number of ranks, more than one), each host has its
    own segment, and between summing its slice and writing it back, rank r sums that slice
    with the same slice of the other hosts: one Iallreduce among the ranks holding slice r
    (a communicator per local rank). Every rank of a host takes part in the network traffic,
    each with 1/N of the bucket, and the slices of one bucket cross the network in parallel.
    These start in launch order on every rank (`take_turn`), as MPI wants collectives on a
    communicator started in one order everywhere. They go by the library's Iallreduce or
    mpigrad's ring, whichever hierarchical.py's `cross_host_algorithm` picks between the
    hosts' first ranks (timed once at construction, or $MPIGRAD_CROSS_HOST_ALLREDUCE) for
    every slice.

Flags hold how many times this model launched that bucket (the same count on every rank: DDP
launches buckets in the same order everywhere, Join's shadow iterations and failed iterations
included), so they only grow and never need resetting. A rank only writes another rank's
region between that rank's `ready` and its own `summed`, when the owner is still in backward
and does not touch the bucket; the owner waits for every `summed` before using its `.grad`.

Ordering: the data is written by ordinary stores and the flag after it. x86's memory model
keeps stores in order and loads in order, which is all the protocol needs; other CPUs
reorder them and Python has no portable fence, so there `SharedBuckets.create` returns None
and DDP uses MPI. Hosts are told apart by their names, as in hierarchical.py (a host whose
ranks cannot all map the file is an agreed fallback too). The segment is a file in /dev/shm
that the host's first rank creates and removes as soon as every rank has mapped it (nothing
is left behind if a rank dies later), reserved with `posix_fallocate` so that a small
/dev/shm (64 MiB in a default Docker container) is an agreed fallback to MPI at
construction, never a SIGBUS in backward. Freeing it is local (an munmap when the last view
of it goes), so unlike an MPI window it needs no collective call, which the garbage
collector could make at different moments on different ranks.

Waiting: a rank waiting for a flag spins with `sched_yield` (so an oversubscribed host
still runs the rank it waits for), and sleeps between looks after the first 10 ms. The Reducer
waits under the process group's watchdog: a peer that stops ends the job with the usual report;
one that dies ends it through the launcher.

`MPIGRAD_DDP_SHARED_MEMORY=0` turns it off: DDP then reduces through MPI as before, one
Iallreduce per bucket on one host, hierarchical.py's rounds across hosts.
"""
import mmap
import os
import platform
import time
import uuid
import warnings
import weakref

import numpy as np
from mpi4py import MPI

from ....futures import Future
from ...fault.watchdog import blocked
from ...process_group import Communicators, duplicate
from .hierarchical import across_hosts, cross_host_algorithm

__all__ = ["SharedBuckets", "shared_memory_allreduce", "ENV"]

ENV = "MPIGRAD_DDP_SHARED_MEMORY"
_DIRECTORY = "/dev/shm"
_ALIGN = 64      # a cache line: slices and buckets never share one between writers
_PAGE = 4096
_READY, _SUMMED, _ACROSS = 0, 1, 2  # flags exist for the first two
_TOTAL_STORE_ORDER = ("x86_64", "amd64", "i386", "i686")
_SPIN_SECONDS = 0.01


def _aligned(n, to):
    return -(-n // to) * to


class SharedBuckets:
    """The shared segment of one DDP model on this rank's host (see the module docstring);
    `rank` and `size` are this rank's place among the host's ranks."""

    @classmethod
    def create(cls, comm, process_group, params, host_names):
        """Collective over `comm`, whose ranks run on the hosts `host_names` (every rank's,
        in rank order): the segment of this rank's host for buckets holding `params`, or None
        where it cannot be used (one rank per host, hosts with different numbers of ranks,
        turned off, another CPU architecture, /dev/shm missing or too small on some rank),
        the same answer on every rank."""
        rank = comm.Get_rank()
        hosts = list(dict.fromkeys(host_names))
        local = [r for r, name in enumerate(host_names) if name == host_names[rank]]
        if len(local) == 1 or len(set(host_names.count(h) for h in hosts)) > 1:
            return None
        wanted = os.environ.get(ENV, "1") != "0" and \
            platform.machine().lower() in _TOTAL_STORE_ORDER
        slots = len(params) + 1
        flags_bytes = _aligned(slots * 2 * 8, _PAGE)
        data_bytes = _aligned(sum(p._array.nbytes + _ALIGN for p in params), _PAGE)
        stride = flags_bytes + data_bytes
        what = "DistributedDataParallel's shared-memory buckets"
        with blocked(process_group, f"making {what}"):
            host = duplicate(comm, what, lambda: comm.Split(hosts.index(host_names[rank]), rank))
            try:
                name, problem = None, None
                if wanted and host.Get_rank() == 0:
                    name, problem = _make_file(stride * len(local))
                name = host.bcast(name if wanted else None, root=0)
                memory = None
                if name is not None and wanted:
                    try:
                        memory = _map(name)
                    except OSError as exc:
                        problem = exc
                ok = np.array([memory is not None], np.int64)
                comm.Allreduce(MPI.IN_PLACE, ok, MPI.MIN)
                if host.Get_rank() == 0 and name is not None:
                    os.unlink(os.path.join(_DIRECTORY, name))
                across, ring = None, False
                if ok[0] and len(hosts) > 1:  # each slice is summed across hosts by its owners
                    across = duplicate(comm, what, lambda: comm.Split(local.index(rank), rank))
                    # The hosts' first ranks choose for every slice, alone on the network:
                    # when every slice's owners timed at once they shared the link, and on a
                    # 1 Gbit/s link often chose the library, 1.2-1.3x slower there.
                    if host.Get_rank() == 0:
                        ring = cross_host_algorithm(across) == "ring"
                    ring = host.bcast(ring, root=0)
            finally:
                host.Free()
        if problem is not None:
            warnings.warn(f"DistributedDataParallel: no shared memory for the gradient buckets "
                          f"on rank {rank} ({problem}); every rank reduces through MPI "
                          f"instead. Give {_DIRECTORY} room for {stride * len(local)} bytes "
                          f"(e.g. docker run --shm-size), or set {ENV}=0 to silence this.",
                          RuntimeWarning, stacklevel=3)
        if not ok[0]:
            return None
        return cls(memory, local.index(rank), len(local), slots, flags_bytes, stride, across,
                   ring, process_group)

    def __init__(self, memory, rank, size, slots, flags_bytes, stride, across, ring,
                 process_group):
        whole = np.frombuffer(memory, np.uint8)
        self.rank, self.size = rank, size  # on this host
        self.across, self.ring_across_hosts = across, ring
        self._regions = [whole[r * stride:(r + 1) * stride] for r in range(size)]
        self._base = self._regions[rank].__array_interface__["data"][0]
        self._flags = [region[:slots * 2 * 8].view(np.int64).reshape(slots, 2)
                       for region in self._regions]
        self._data_start = flags_bytes
        self._data_end = stride
        self._launches = {}
        self._turns_taken = self._turns_started = 0
        # `close()` frees `across` at a point every rank reaches; dropped without it, the
        # buckets only release it, for an agreement of the group's (see Communicators).
        communicators = Communicators(process_group, [across] if across is not None else [])
        self.close = communicators.free
        weakref.finalize(self, communicators.release)

    def storage(self, layout):
        """Arrays for buckets of `layout`, a list of (dtype, element count), laid out one
        after another in this rank's region (the same offsets on every rank)."""
        arrays, offset = [], self._data_start
        for dtype, count in layout:
            dtype = np.dtype(dtype)
            end = offset + count * dtype.itemsize
            if end > self._data_end:
                raise ValueError("DistributedDataParallel: the buckets outgrew the shared "
                                 "segment made for the model's parameters")
            arrays.append(self._regions[self.rank][offset:end].view(dtype))
            offset = _aligned(end, _ALIGN)
        return arrays

    def views(self, array):
        """`array` (a bucket returned by `storage`) in every rank's region, in rank order."""
        start = array.__array_interface__["data"][0] - self._base
        return [region[start:start + array.nbytes].view(array.dtype)
                for region in self._regions]

    def holds(self, array):
        start = array.__array_interface__["data"][0] - self._base
        return self._data_start <= start and start + array.nbytes <= self._data_end

    def raise_flag(self, slot, phase):
        """Say this rank has reached `phase` of launch number (the returned count) of `slot`."""
        count = self._launches.get((slot, phase), 0) + 1
        self._launches[(slot, phase)] = count
        self._flags[self.rank][slot, phase] = count
        return count

    def all_raised(self, slot, phase, count):
        return all(flags[slot, phase] >= count for flags in self._flags)

    def take_turn(self):
        """The place of a new reduction in the order they must start their sums across hosts
        (launch order: each `across` communicator sees the buckets in the same order)."""
        self._turns_taken += 1
        return self._turns_taken - 1

    def may_start(self, turn):
        return turn == self._turns_started

    def started(self):
        self._turns_started += 1


def shared_memory_allreduce(shared, bucket):
    """The Future of the sum over ranks of `bucket`, whose buffer lives in `shared` (see the
    module docstring)."""
    return _SharedReduction(shared, bucket)


class _SharedReduction(Future):
    """Phase 1: wait for every local rank's `ready`, then sum this rank's slice over the
    host's copies; across hosts, sum that with the same slice of the other hosts (an
    Iallreduce among the ranks owning it); write it into every copy on the host. Phase 2:
    wait for every local rank's `summed`. Its value is the bucket's buffer."""

    def __init__(self, shared, bucket):
        super().__init__()
        self._shared = shared
        self._buffer = bucket.buffer()
        self._slot = bucket.index()
        self._count = shared.raise_flag(self._slot, _READY)
        self._turn = shared.take_turn()
        self._phase = _READY
        self._views = self._piece = self._rounds = None
        self._requests = []

    def _progress(self, block):
        shared, slot, count = self._shared, self._slot, self._count
        if self._phase == _READY:
            if not _wait_for(shared, slot, _READY, count, block):
                return
            self._views = shared.views(self._buffer)
            self._piece = _my_piece(self._buffer.size, shared.rank, shared.size)
            _sum_over(self._views, self._piece, shared.rank)
            self._phase = _ACROSS
        if self._phase == _ACROSS:
            if not self._sum_across(block):
                return
            _copy_out(self._views, self._piece, shared.rank)
            shared.raise_flag(slot, _SUMMED)
            self._phase = _SUMMED
        if _wait_for(shared, slot, _SUMMED, count, block):
            self.set_result(self._buffer)

    def _sum_across(self, block):
        """Sum this rank's slice with the other hosts' (nothing to do on one host), in the
        rounds of `across_hosts`; whether that is done."""
        shared = self._shared
        if self._rounds is None:
            if not shared.may_start(self._turn):
                if block:  # the Reducer waits in launch order, so this cannot happen
                    raise RuntimeError("DistributedDataParallel: a bucket's sum across hosts "
                                       "was waited for before an earlier bucket's started")
                return False
            shared.started()
            total = self._views[shared.rank][self._piece]
            if shared.across is None or total.size == 0:
                return True
            self._rounds = across_hosts(shared.across, total, shared.ring_across_hosts,
                                        self._slot)
        while True:
            if block:
                MPI.Request.Waitall(self._requests)
            elif not MPI.Request.Testall(self._requests):
                return False
            try:
                self._requests = next(self._rounds)
            except StopIteration:
                return True


def _wait_for(shared, slot, phase, count, block):
    """Whether every rank has raised `phase` of launch `count` of `slot`; with `block`, wait
    until so (spinning, yielding the core, then sleeping between looks)."""
    if shared.all_raised(slot, phase, count):
        return True
    if not block:
        return False
    start = time.perf_counter()
    while not shared.all_raised(slot, phase, count):
        if time.perf_counter() - start < _SPIN_SECONDS:
            os.sched_yield()
        else:
            time.sleep(1e-4)
    return True


def _my_piece(size, rank, ranks):
    """Slice `rank` of a bucket of `size` elements cut in `ranks`, at cache-line multiples."""
    step = _aligned(-(-size // ranks), _ALIGN)
    return slice(min(rank * step, size), min((rank + 1) * step, size))


def _sum_over(views, piece, rank):
    """Sum slice `piece` over every rank's copy into this rank's (its own first, then the
    others in rank order)."""
    total = views[rank][piece]
    for other, view in enumerate(views):
        if other != rank and total.size:
            np.add(total, view[piece], out=total)


def _copy_out(views, piece, rank):
    for other, view in enumerate(views):
        if other != rank:
            np.copyto(view[piece], views[rank][piece])


def _make_file(nbytes):
    """Rank 0: a new file of `nbytes` in /dev/shm, its space reserved. (name, None), or
    (None, the reason) when it cannot be made."""
    name = f"mpigrad-ddp-{os.getpid()}-{uuid.uuid4().hex}"
    path = os.path.join(_DIRECTORY, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return None, exc
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        return None, exc
    os.close(fd)
    return name, None


def _map(name):
    fd = os.open(os.path.join(_DIRECTORY, name), os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
