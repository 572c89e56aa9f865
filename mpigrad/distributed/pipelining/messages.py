"""Activations and their gradients between neighbouring stages, as nonblocking messages.

Each tensor travels as two messages with tags of its own (see `tag`): a small header (dtype,
shape, or "no tensor" when a stage has no gradient to send back) and the data. A receiving
stage posts every header receive of a step when the step starts, and posts a data receive as
soon as its header is in (`Inbox.poll`, called between computations), so a message moves
while both ranks compute; it blocks (under the watchdog, through `Work.wait`) only when it
needs a tensor that has not arrived. Sends never block until the end of the step.
"""
import numpy as np

from ...tensor import Tensor
from ..fault.watchdog import blocked
from ..p2p import irecv, isend
from ..process_group import member_group

ACTIVATION, GRADIENT = 0, 1
_WHAT = {ACTIVATION: "activation", GRADIENT: "gradient"}
_HEADER, _DATA = 0, 1
_MAX_DIMS = 8
_NO_TENSOR = -1
# The dtypes an activation can have; a header names one by its index here.
_DTYPES = tuple(np.dtype(name) for name in (
    "float64", "float32", "float16", "complex128", "complex64", "int64", "int32", "int16",
    "int8", "uint8", "bool"))


def tag(kind, receiver_stage, microbatch, n_microbatches, part):
    """Distinct for every message of a step between two ranks, which may hold several stages
    each (interleaved schedules)."""
    return ((receiver_stage * 2 + kind) * n_microbatches + microbatch) * 2 + part


def _header(array):
    header = np.zeros(2 + _MAX_DIMS, dtype=np.int64)
    if array is None:
        header[1] = _NO_TENSOR
        return header
    if array.ndim > _MAX_DIMS or array.dtype not in _DTYPES:
        raise TypeError(f"a pipeline stage can pass on tensors of up to {_MAX_DIMS} dimensions "
                        f"with dtypes {[str(d) for d in _DTYPES]}, got {array.dtype} of shape "
                        f"{array.shape}")
    header[0] = _DTYPES.index(array.dtype)
    header[1] = array.ndim
    header[2:2 + array.ndim] = array.shape
    return header


class Outbox:
    """The sends of a step in flight; `finish()` waits for them all."""

    def __init__(self, group):
        self.group = group
        self.works = []
        self.peers = set()

    def send(self, tensor, peer, kind, receiver_stage, microbatch, n_microbatches):
        """Send `tensor` (or "no tensor", for None) to global rank `peer`."""
        array = None if tensor is None else np.ascontiguousarray(tensor._array)
        header = _header(array)
        self.peers.add(peer)
        self.works.append(isend(header, peer, self.group,
                                tag(kind, receiver_stage, microbatch, n_microbatches, _HEADER)))
        if array is not None:
            self.works.append(isend(array, peer, self.group,
                                    tag(kind, receiver_stage, microbatch, n_microbatches, _DATA)))

    def finish(self):
        with blocked(member_group(self.group, "pipeline"), "pipeline: the step's last sends",
                     collective=False, peers=tuple(self.peers)):
            for work in self.works:
                work.wait()
        self.works, self.peers = [], set()


class Inbox:
    """One kind of message (activations or gradients) to one stage, for every micro-batch of
    a step, from global rank `peer`."""

    def __init__(self, group, peer, kind, stage, n_microbatches):
        self.group, self.peer, self.kind, self.stage = group, peer, kind, stage
        self.n = n_microbatches
        self.headers = [np.empty(2 + _MAX_DIMS, dtype=np.int64) for _ in range(self.n)]
        self.header_works = [irecv(header, peer, group, self._tag(mb, _HEADER))
                             for mb, header in enumerate(self.headers)]
        self.data = [None] * self.n  # (array, Work) once its header is in; () for no tensor
        self.next_header = 0  # every schedule sends in micro-batch order: poll from here

    def _tag(self, microbatch, part):
        return tag(self.kind, self.stage, microbatch, self.n, part)

    def poll(self):
        """Post the data receives whose headers have arrived, without blocking."""
        while self.next_header < self.n and (
                self.data[self.next_header] is not None
                or self.header_works[self.next_header].is_completed()):
            if self.data[self.next_header] is None:
                self._post(self.next_header)
            self.next_header += 1

    def take(self, microbatch):
        """The tensor for `microbatch` (None if the sender had none), waiting for it. A wait
        is reported (stall reports, timeouts) as what the stage waits for."""
        what = (f"pipeline stage {self.stage} waiting for the {_WHAT[self.kind]} of "
                f"micro-batch {microbatch} from rank {self.peer}")
        with blocked(member_group(self.group, "pipeline"), what, collective=False,
                     peers=(self.peer,)):
            if self.data[microbatch] is None:
                self.header_works[microbatch].wait()
                self._post(microbatch)
            if not self.data[microbatch]:
                return None
            array, work = self.data[microbatch]
            work.wait()
        return Tensor.wrap(array)

    def _post(self, mb):
        header = self.headers[mb]
        ndim = int(header[1])
        if ndim == _NO_TENSOR:
            self.data[mb] = ()
            return
        array = np.empty(tuple(int(n) for n in header[2:2 + ndim]), dtype=_DTYPES[header[0]])
        self.data[mb] = (array, irecv(array, self.peer, self.group, self._tag(mb, _DATA)))
