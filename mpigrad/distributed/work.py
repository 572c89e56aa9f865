"""`Work`: the Future of a communication in flight, over one or more MPI requests.

`async_op=True` collectives, `isend`/`irecv` and DistributedDataParallel's comm hooks all
return a Work. It keeps torch.distributed.Work's API (`wait()`, `is_completed()`,
`get_future()`, `source_rank()` for an irecv) and is an `mpigrad.futures.Future`
(`done()`, `value()`, `then()`, `add_done_callback()`), so one type serves both.

What `wait()` returns: the Work's value, as for every Future. A collective's or a message's
value is True, which is what torch's `Work.wait()` returns; a comm hook's is the reduced
bucket array, which is what torch's hook futures hold. `get_future()` is the Work itself.
"""
from mpi4py import MPI

from ..futures import Future
from .fault.watchdog import blocked, next_number, wait_all


class Work(Future):
    """A nonblocking operation in flight, like `torch.distributed.Work`.

    `requests` are the mpi4py requests behind it, public so that code batching many
    collectives can progress them with `MPI.Request.Testall`/`Waitall` itself; it must still
    call `wait()` afterwards (which then returns at once) to run the completion step. (An
    irecv's completion step needs the receive's status: wait for it through `wait()` only.)
    `on_complete(statuses)` runs once, when the requests finish, for the part MPI cannot do
    (AVG's division, copying out of staging buffers, autograd version bumps); what it returns
    is the Work's value (True without it). `on_error(exc, statuses)` turns an MPI error into a
    clearer exception. `keep_alive` holds the buffers MPI is reading or writing, so they
    outlive the call that started the operation. Blocking waits run under the watchdog of
    `pg`, the group the operation (described by `what`) runs on, so they end within its
    timeout; a collective's wait carries the number the Work took when created (on every
    rank), and a point-to-point one (`collective=False`) concerns only `peers` (global ranks;
    None for a receive from any rank). A Work is driven by the thread that started it.
    """

    def __init__(self, pg, what, requests, on_complete=None, on_error=None, keep_alive=(),
                 collective=True, peers=None):
        super().__init__()
        self._pg, self._what, self._collective, self._peers = pg, what, collective, peers
        self._number = next_number(pg, f"waiting for {what}") if collective else None
        self.requests = list(requests)
        self._on_complete = on_complete
        self._on_error = on_error
        self._keep_alive = keep_alive
        self._statuses = [MPI.Status() for _ in self.requests]

    def is_completed(self):
        """Whether the operation has finished; raises its error if it failed. Each call also
        lets MPI make progress on it."""
        completed = self.done()
        if completed and self.exception() is not None:
            raise self.exception()
        return completed

    def get_future(self):
        """The Future of this operation: the Work itself."""
        return self

    def source_rank(self):
        """For an `irecv`: the (global) rank the message came from. Waits for it first."""
        self.wait()
        raise ValueError("source_rank() is only defined for the Work of an irecv")

    def _progress(self, block):
        if self._completed:
            return
        try:
            if block:
                with blocked(self._pg, f"waiting for {self._what}", self._collective,
                             self._peers, self._number):
                    wait_all(self.requests, self._statuses)
            elif not MPI.Request.Testall(self.requests, self._statuses):
                return
        except MPI.Exception as exc:
            self._keep_alive = ()
            cause = _request_error(exc, self._statuses)
            error = self._on_error(cause, self._statuses) if self._on_error else cause
            if error is not exc:
                error.__cause__ = exc
            self.set_exception(error)
            return
        self._keep_alive = ()
        try:
            value = True if self._on_complete is None else self._on_complete(self._statuses)
        except Exception as exc:  # handed to whoever waits, as the Work's error
            self.set_exception(exc)
            return
        self.set_result(value)


def _request_error(exc, statuses):
    """Waitall/Testall report a failed request as ERR_IN_STATUS; the real error class is in
    the failed request's status."""
    if exc.Get_error_class() == MPI.ERR_IN_STATUS:
        for status in statuses:
            if status.Get_error() not in (MPI.SUCCESS, MPI.ERR_PENDING):
                return MPI.Exception(status.Get_error())
    return exc
