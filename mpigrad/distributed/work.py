"""`Work`: the handle `async_op=True` returns, over one or more MPI requests."""
from mpi4py import MPI

from .watchdog import blocked


class Work:
    """A nonblocking operation in flight, like `torch.distributed.Work`.

    `requests` are the mpi4py requests behind it, public so that code batching many
    collectives can progress them with `MPI.Request.Testall`/`Waitall` itself; it must still
    call `wait()` afterwards (which then returns at once) to run the completion step. (An
    irecv's completion step needs the receive's status: wait for it through `wait()` only.)
    `on_complete(statuses)` runs once, when the requests finish, for the part MPI cannot do
    (AVG's division, copying out of staging buffers, autograd version bumps); what it returns
    is the Work's result. `on_error(exc, statuses)` turns an MPI error into a clearer
    exception. `keep_alive` holds the buffers MPI is reading or writing, so they outlive the
    call that started the operation. `wait()` runs under the watchdog of `pg`, the group the
    operation (described by `what`) runs on.
    """

    def __init__(self, pg, what, requests, on_complete=None, on_error=None, keep_alive=()):
        self._pg, self._what = pg, what
        self.requests = list(requests)
        self._on_complete = on_complete
        self._on_error = on_error
        self._keep_alive = keep_alive
        self._statuses = [MPI.Status() for _ in self.requests]
        self._done = False
        self._exception = None
        self._result = None

    def wait(self):
        """Block until the operation finishes (the outputs are then valid); returns True."""
        if not self._done:
            self._finish(block=True)
        if self._exception is not None:
            raise self._exception
        return True

    def is_completed(self):
        """Whether the operation has finished. Each call also lets MPI make progress on it."""
        if not self._done:
            self._finish(block=False)
        if self._exception is not None:
            raise self._exception
        return self._done

    def source_rank(self):
        """For an `irecv`: the (global) rank the message came from. Waits for it first."""
        self.wait()
        if self._result is None:
            raise ValueError("source_rank() is only defined for the Work of an irecv")
        return self._result

    def _finish(self, block):
        try:
            if block:
                with blocked(self._pg, f"waiting for {self._what}"):
                    MPI.Request.Waitall(self.requests, self._statuses)
            elif not MPI.Request.Testall(self.requests, self._statuses):
                return
        except MPI.Exception as exc:
            self._done = True
            cause = _request_error(exc, self._statuses)
            self._exception = self._on_error(cause, self._statuses) if self._on_error else cause
            raise self._exception from exc
        self._done = True
        self._keep_alive = ()
        try:
            if self._on_complete is not None:
                self._result = self._on_complete(self._statuses)
        except Exception as exc:
            self._exception = exc
            raise


def _request_error(exc, statuses):
    """Waitall/Testall report a failed request as ERR_IN_STATUS; the real error class is in
    the failed request's status."""
    if exc.Get_error_class() == MPI.ERR_IN_STATUS:
        for status in statuses:
            if status.Get_error() not in (MPI.SUCCESS, MPI.ERR_PENDING):
                return MPI.Exception(status.Get_error())
    return exc
