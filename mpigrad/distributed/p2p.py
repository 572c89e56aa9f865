"""Point-to-point messages between two ranks: send, recv, isend, irecv.

Ranks are global ranks; `group=` picks the communicator (the peer must be a member). A receive
checks that the message filled its buffer exactly: MPI itself only notices a message that is
too long, and would leave the tail of the buffer stale for one that is too short.
"""
import numbers

from mpi4py import MPI

from .buffers import array_of, mark_written, message
from .errors import MessageMismatchError
from .process_group import group_rank_of, member_group
from .fault.watchdog import before_call, blocked, interruptible
from .work import Work


def send(tensor, dst, group=None, tag=0):
    """Send `tensor` to rank `dst`; returns once the buffer may be reused."""
    pg = member_group(group, "send")
    if pg is None:
        return
    arr, peer = prepare(pg, tensor, dst, "dst", tag, blocking=True)
    with blocked(pg, f"send to rank {dst} (tag {tag})", collective=False, peers=(dst,)):
        interruptible(lambda: pg.comm.Send(message(arr), peer, tag),
                      lambda: pg.comm.Isend(message(arr), peer, tag))


def recv(tensor, src=None, group=None, tag=0):
    """Receive into `tensor` from rank `src` (any rank when None); returns the sender's rank."""
    pg = member_group(group, "recv")
    if pg is None:
        return -1
    arr, peer = prepare(pg, tensor, src, "src", tag, blocking=True, writable=True)
    source = receive_exact(pg, pg.comm, arr, peer, tag)
    mark_written(tensor)
    return source


def isend(tensor, dst, group=None, tag=0):
    """Start sending `tensor` to `dst`; don't modify it until the returned Work completes."""
    pg = member_group(group, "isend")
    if pg is None:
        return None
    arr, peer = prepare(pg, tensor, dst, "dst", tag)
    request = pg.comm.Isend(message(arr), peer, tag)
    return Work(pg, f"isend to rank {dst} (tag {tag})", [request], keep_alive=arr,
                collective=False, peers=(dst,))


def irecv(tensor, src=None, group=None, tag=0):
    """Start receiving into `tensor` from `src` (any rank when None). The returned Work's
    `source_rank()` is the sender."""
    pg = member_group(group, "irecv")
    if pg is None:
        return None
    arr, peer = prepare(pg, tensor, src, "src", tag, writable=True)
    request = pg.comm.Irecv(message(arr), peer, tag)
    return _ReceiveWork(pg, f"irecv from {_peer_text(src)} (tag {tag})", request, tensor, arr,
                        src)


class _ReceiveWork(Work):
    """An irecv's Work: checks the message filled the buffer and remembers its sender."""

    def __init__(self, pg, what, request, tensor, arr, src):
        def done(statuses):
            self._source = _sender_if_exact(statuses[0], arr, pg)
            mark_written(tensor)
            return True

        peers = None if src is None else (src,)
        super().__init__(pg, what, [request], on_complete=done, collective=False, peers=peers,
                         on_error=lambda exc, statuses: _receive_error(exc, arr, pg, statuses[0]),
                         keep_alive=arr)
        self._source = None

    def source_rank(self):
        self.wait()
        return self._source


def receive_exact(pg, comm, arr, peer, tag):
    """Blocking receive into `arr` from `peer` (a rank of `pg`, or ANY_SOURCE) on `comm` (one
    of `pg`'s communicators); returns the sender's global rank. Raises MessageMismatchError
    unless the message fills `arr` exactly."""
    status = MPI.Status()
    source = None if peer == MPI.ANY_SOURCE else pg.ranks[peer]
    try:
        with blocked(pg, f"recv from {_peer_text(source)} (tag {tag})", collective=False,
                     peers=None if source is None else (source,)):
            interruptible(lambda: comm.Recv(message(arr), peer, tag, status),
                          lambda: comm.Irecv(message(arr), peer, tag), status)
    except MPI.Exception as exc:
        raise _receive_error(exc, arr, pg, status) from exc
    return _sender_if_exact(status, arr, pg)


def prepare(pg, tensor, peer, name, tag, blocking=False, writable=False):
    """Check a point-to-point call's arguments; returns the array and the peer's rank in `pg`
    (ANY_SOURCE when `peer` is None)."""
    before_call()  # first: a test scope's gate may move the group to fresh communicators
    arr = array_of(tensor, "tensor", writable=writable)
    max_tag = pg.comm.Get_attr(MPI.TAG_UB)
    if not isinstance(tag, numbers.Integral) or not 0 <= tag <= max_tag:
        raise ValueError(f"tag must be an int in [0, {max_tag}], got {tag!r}")
    if peer is None:
        return arr, MPI.ANY_SOURCE
    group_peer = group_rank_of(pg, peer, name)
    if blocking and group_peer == pg.rank():
        # Blocking send and receive to oneself deadlock once the message is too big to buffer.
        raise ValueError(f"{name}={peer} is this process's own rank; a blocking send/recv to "
                         f"itself would deadlock (use isend/irecv)")
    return arr, group_peer


def _peer_text(src):
    return "any rank" if src is None else f"rank {src}"


def _sender_if_exact(status, arr, pg):
    source = pg.ranks[status.Get_source()]
    got = status.Get_count(MPI.BYTE)
    if got != arr.nbytes:
        raise MessageMismatchError(
            f"received {got} bytes from rank {source} (tag {status.Get_tag()}) into a tensor of "
            f"shape {arr.shape} and dtype {arr.dtype} ({arr.nbytes} bytes): the sender's "
            f"tensor has a different shape or dtype")
    return source


def _receive_error(exc, arr, pg, status):
    if exc.Get_error_class() != MPI.ERR_TRUNCATE:
        return exc
    source = status.Get_source()
    sender = f" from rank {pg.ranks[source]}" if 0 <= source < pg.size() else ""
    return MessageMismatchError(
        f"the message{sender} is larger than the receiving tensor of shape {arr.shape} and dtype "
        f"{arr.dtype} ({arr.nbytes} bytes): the sender's tensor has a different shape or dtype")
