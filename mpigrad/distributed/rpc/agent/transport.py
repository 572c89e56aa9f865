"""How the agent's messages travel over MPI: what wire.py makes of a message (a header, and
its tensors when they are too big to ride inside it) put on the agent's communicator and
taken off it.

A header goes on HEADER_TAG; a message's separate tensors follow on a tag of their own,
unique per message (so arrays of messages sent at once by several threads never mix).
Requests and replies leave by blocking sends from the thread that makes them, under the
watchdog; small control messages and acknowledgements leave as `Isend`s, kept until
complete, since a receiving thread must never block on a send. Nor on a receive: a message's
tensors are received by requests that stay pending, tested by the receiving threads between
other messages, so one whose tensors are slow, or never come, holds up no other.
"""
import itertools
import threading
import time

from mpi4py import MPI

from ...buffers import message
from ...fault.watchdog import blocked
from .. import wire

HEADER_TAG = 1
# Seconds the tensors of a message may take to follow its header (at least; the agent's
# rpc_timeout if that is longer).
ARRAYS_DEADLINE = 60.0
_FIRST_DATA_TAG = 2
# Tensors of at most this many bytes in all travel inside the header, as one MPI message:
# below it, a second message (and the receiver's posting and testing of it) costs more than
# copying the bytes.
_INLINE_BYTES = 1 << 16


class Watched:
    """What the watchdog needs to know of the RPC agent's calls: a name for reports, the
    ranks they involve and how long one may block."""

    def __init__(self, size, timeout):
        self.name = "RPC"
        self.ranks = tuple(range(size))
        self.timeout = timeout if timeout > 0 else float("inf")


def watched(size, rpc_timeout):
    """The watchdog's view of an agent with `rpc_timeout`: a blocked send may take as long
    as a message's tensors may take to arrive (none when the timeout is 0)."""
    return Watched(size, max(ARRAYS_DEADLINE, rpc_timeout) if rpc_timeout > 0 else 0)


class _Arriving:
    """A message whose header has come, and whose tensors are being received."""
    __slots__ = ("source", "parsed", "requests", "seconds", "deadline")

    def __init__(self, source, parsed, requests, seconds):
        self.source, self.parsed, self.requests = source, parsed, requests
        self.seconds, self.deadline = seconds, time.monotonic() + seconds


class Transport:
    """Sending and receiving one agent's messages on `comm`; `codec` holds the encode hooks
    of RRefs and distributed autograd, `descriptions` what each rank is called in reports."""

    def __init__(self, comm, watched, codec, descriptions, timeout):
        self.comm = comm
        self.watched = watched
        self.codec = codec
        # What a blocked send to each rank is called in stall reports, made once: a send is
        # on the small-call path, where an f-string per message shows.
        self._sending_to = [f"RPC: sending to {d}" for d in descriptions]
        self.arrays_deadline = max(ARRAYS_DEADLINE, timeout)
        self._data_tags = itertools.count()
        self._tag_span = comm.Get_attr(MPI.TAG_UB) - _FIRST_DATA_TAG
        self._in_flight = []  # (request, buffer) of Isends not known to be complete
        self._in_flight_lock = threading.Lock()
        self._arriving = []  # messages whose tensors are on their way
        self._arriving_lock = threading.Lock()

    def encode(self, dest, kind, msg_id, payload):
        """(header, separate arrays, their tag) of a message to `dest`."""
        body, arrays, layouts, grad_tensors = wire.dumps(
            payload, lambda r: self.codec.fork(r, dest), self.codec.records_grad())
        size = sum(a.nbytes for a in arrays)
        autograd = self.codec.record_send(dest, grad_tensors)
        if size <= _INLINE_BYTES:
            return wire.header(kind, msg_id, 0, layouts, autograd, body, arrays), [], 0
        tag = _FIRST_DATA_TAG + next(self._data_tags) % self._tag_span
        return wire.header(kind, msg_id, tag, layouts, autograd, body), arrays, tag

    def send(self, dest, header, arrays, tag):
        """Send a message from this thread; returns once MPI has taken all of it."""
        with blocked(self.watched, self._sending_to[dest], collective=False, peers=(dest,)):
            self.comm.Send([header, MPI.BYTE], dest, HEADER_TAG)
            if arrays:
                MPI.Request.Waitall([self.comm.Isend(message(a), dest, tag) for a in arrays])

    def isend(self, dest, header):
        """Start sending a header-only message; it is kept until complete (see prune)."""
        buffer = bytearray(header)
        request = self.comm.Isend([buffer, MPI.BYTE], dest, HEADER_TAG)
        with self._in_flight_lock:  # receiving threads send acks; the listener prunes
            self._in_flight.append((request, buffer))

    def prune(self):
        """Forget the Isends that have completed."""
        if self._in_flight:
            with self._in_flight_lock:
                self._in_flight = [(r, b) for r, b in self._in_flight if not r.Test()]

    def probe(self, status):
        """The next header waiting to be received (its source in `status`), or None."""
        return self.comm.Improbe(MPI.ANY_SOURCE, HEADER_TAG, status)

    def receive_header(self, incoming, status):
        """(source, the header's bytes) of a probed message."""
        header = bytearray(status.Get_count(MPI.BYTE))
        incoming.Recv([header, MPI.BYTE])
        return status.Get_source(), header

    def expect_arrays(self, source, tag, buffers, parsed):
        """Start receiving the tensors that follow a header from `source` into `buffers`;
        `parsed` (the header's message) comes back from `arrived` once they are all in."""
        requests = [self.comm.Irecv(message(a), source, tag) for a in buffers]
        arriving = _Arriving(source, parsed, requests, self.arrays_deadline)
        with self._arriving_lock:
            self._arriving.append(arriving)

    def arrived(self):
        """(source, parsed, None) of a message whose tensors have all arrived, or (source,
        None, TimeoutError) of one whose tensors did not arrive within `arrays_deadline`
        seconds: they are sent right after the header, so they never will (a truncated
        message; its receives are cancelled). None when no message is due, or while another
        thread looks (requests are tested by one thread at a time)."""
        if not self._arriving or not self._arriving_lock.acquire(blocking=False):
            return None
        try:
            now = time.monotonic()
            for i, arriving in enumerate(self._arriving):
                if MPI.Request.Testall(arriving.requests):
                    del self._arriving[i]
                    return arriving.source, arriving.parsed, None
                if now > arriving.deadline:
                    for request in arriving.requests:
                        request.Cancel()
                    del self._arriving[i]
                    return arriving.source, None, TimeoutError(
                        f"its tensors did not arrive within {arriving.seconds:g} s")
            return None
        finally:
            self._arriving_lock.release()

    def cancel_arrivals(self):
        """Stop receiving tensors that have not arrived: the agent is stopping."""
        with self._arriving_lock:
            for arriving in self._arriving:
                for request in arriving.requests:
                    request.Cancel()
            self._arriving = []

    def say_bye(self, header, ranks):
        """Send `header` to `ranks` at once, waiting briefly: small eager sends complete at
        once; a dying process never hangs on one that doesn't."""
        requests = [self.comm.Isend([header, MPI.BYTE], r, HEADER_TAG) for r in ranks]
        deadline = time.monotonic() + 2.0
        while requests and time.monotonic() < deadline:
            requests = [r for r in requests if not r.Test()]
            time.sleep(1e-3)
        for r in requests:
            r.Cancel()
