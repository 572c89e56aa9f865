"""`Channel`: DistributedDataParallel's MPI traffic on a process group, under its watchdog.

DDP talks on communicators of its own, duplicates of the process group's, so its messages
never match the user's collectives: `comm` carries the gradient reductions (the comm hooks'
nonblocking calls), `control` the small blocking messages (the construction check, the
end-of-backward agreement, the bucket rebuild, buffer broadcasts). Every blocking call here
runs inside `watchdog.blocked` with the group's timeout (a hook's `Work` waits the same way),
so a dead or stopped peer ends the job with a message saying what this rank was waiting for
instead of a hang.

The communicators are the group's `Communicators`: when the Channel is collected (its DDP
wrapper was dropped) they are released, and freed at the group's next agreement (the next
wrapper's construction, `new_group`), or when the group is destroyed: MPI has a fixed number
of them per process (2048 in MPICH), which a sweep creating DDP wrappers in a loop would
otherwise exhaust. Never freed by the collector itself, whose timing differs between ranks.
"""
import numpy as np
from mpi4py import MPI

from ..buffers import mpi_type
from ..process_group import DuplicatedCommunicators, duplicate


class Channel(DuplicatedCommunicators):
    """The communicators and blocking operations DDP (the Reducer, DDP itself, Join's DDP
    hook) uses on `process_group`."""

    def __init__(self, process_group):
        super().__init__(process_group, "DistributedDataParallel", "wrap the model again")
        self.rank = self.comm.Get_rank()
        self.world_size = self.comm.Get_size()
        # For hooks reducing in several rounds (rounds.py): a communicator per round after
        # the first.
        self._round_comms = []

    def round_comms(self, n):
        """`n` communicators for the rounds of a hook: `comm`, then duplicates of it made on
        first need (collectively: every rank asks at the same point, a hook's call for bucket
        0) and freed with the Channel."""
        while len(self._round_comms) < n - 1:
            with self.blocked("duplicating the communicator for a hook's rounds"):
                self._round_comms.append(duplicate(self.comm, "DistributedDataParallel"))
            self._comms.append(self._round_comms[-1])
        return [self.comm] + self._round_comms[:n - 1]

    @property
    def comm(self):
        return self._open()[0]

    def allreduce_max(self, array, what):
        """The elementwise maximum over the ranks of `array` (a small int64 vector of control
        data), in place."""
        with self.blocked(what):
            self.control.Allreduce(MPI.IN_PLACE, [array, mpi_type(array.dtype)], MPI.MAX)

    def allgather(self, array, what):
        """Every rank's `array`, stacked along a new first axis."""
        gathered = np.empty((self.world_size,) + array.shape, array.dtype)
        with self.blocked(what):
            self.control.Allgather([array, mpi_type(array.dtype)],
                                   [gathered, mpi_type(array.dtype)])
        return gathered

    def allgather_object(self, obj, what):
        """Every rank's picklable `obj` (small metadata only)."""
        with self.blocked(what):
            return self.control.allgather(obj)

    def broadcast_arrays(self, arrays, root, what):
        """Broadcast `arrays` from `root` in place, as one message of bytes."""
        arrays = [a for a in arrays if a.size]
        if not arrays or self.world_size == 1:
            return
        packed = np.empty(sum(a.nbytes for a in arrays), np.uint8)
        if self.rank == root:
            offset = 0
            for a in arrays:
                packed[offset:offset + a.nbytes] = \
                    np.ascontiguousarray(a).reshape(-1).view(np.uint8)
                offset += a.nbytes
        with self.blocked(what):
            self.control.Bcast([packed, MPI.BYTE], root=root)
        if self.rank != root:
            offset = 0
            for a in arrays:
                np.copyto(a, packed[offset:offset + a.nbytes].view(a.dtype).reshape(a.shape))
                offset += a.nbytes

