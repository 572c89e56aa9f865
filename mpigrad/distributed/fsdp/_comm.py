"""`ShardComm`: the communicators FSDP talks on, for one process group, under its watchdog.

FSDP's messages go over duplicates of the group's communicator, so they never match the
user's collectives: `data` carries the parameter all-gathers and gradient reduce-scatters
(nonblocking, each a `Work` named after its unit), `control` the small blocking messages
(the check that every rank sharded the same modules). Every rank issues the same
collectives in the same order on `data` (units run in the same order everywhere), which is
all MPI asks of nonblocking collectives on one communicator.

The communicators are the group's `Communicators`: when the ShardComm is collected they are
only released, and freed at the group's next point that every rank reaches (see
process_group.Communicators), or with the group. One ShardComm serves every unit sharded over
the same group (`for_group` keeps them).
"""
import weakref

import numpy as np
from mpi4py import MPI

from ..buffers import mpi_float_type, mpi_type
from ..process_group import DuplicatedCommunicators
from ..work import Work

_by_group = weakref.WeakKeyDictionary()


def for_group(pg):
    """The ShardComm of process group `pg` (made collectively, by every member, on first
    use)."""
    comm = _by_group.get(pg)
    if comm is None or not comm.live:
        comm = _by_group[pg] = ShardComm(pg)
    return comm


class ShardComm(DuplicatedCommunicators):
    def __init__(self, pg):
        super().__init__(pg, "FSDP", "shard the model again")
        self.rank = self.data.Get_rank()
        self.size = self.data.Get_size()

    @property
    def live(self):
        return bool(self._comms)

    @property
    def data(self):
        return self._open()[0]

    # ------------------------------------------------------------------ data (nonblocking)
    def all_gather(self, send, recv, what):
        """Start gathering every rank's `send` into the rows of `recv` (shape (size, n))."""
        kind = mpi_type(send.dtype)
        request = self.data.Iallgather([send, kind], [recv, kind])
        return Work(self.process_group, f"FSDP: {what}", [request], keep_alive=(send, recv))

    def reduce_scatter(self, send, recv, what):
        """Start summing the rows of `send` (shape (size, n)) over the ranks, row r landing
        in rank r's `recv`."""
        kind = mpi_float_type(send.dtype)
        request = self.data.Ireduce_scatter_block([send, kind], [recv, kind], MPI.SUM)
        return Work(self.process_group, f"FSDP: {what}", [request], keep_alive=(send, recv))

    def all_reduce(self, array, what):
        """Start summing `array` over the ranks, in place."""
        request = self.data.Iallreduce(MPI.IN_PLACE, [array, mpi_float_type(array.dtype)],
                                       MPI.SUM)
        return Work(self.process_group, f"FSDP: {what}", [request], keep_alive=(array,))

    # ------------------------------------------------------------------ control (blocking)
    def allreduce_sum(self, array, what):
        with self.blocked(what):
            self.control.Allreduce(MPI.IN_PLACE, [array, mpi_float_type(array.dtype)], MPI.SUM)

    def allreduce_max(self, array, what):
        with self.blocked(what):
            self.control.Allreduce(MPI.IN_PLACE, [array, mpi_type(array.dtype)], MPI.MAX)

    def allgather_object(self, obj, what):
        with self.blocked(what):
            return self.control.allgather(obj)

    def agree(self, values, what):
        """Whether every rank passed the same int64 vector `values` (one Allreduce of
        [v, -v] with MAX gives every rank both bounds)."""
        values = np.asarray(values, np.int64)
        bounds = np.concatenate([values, -values])
        self.allreduce_max(bounds, what)
        return not (bounds[:len(values)] + bounds[len(values):]).any()
