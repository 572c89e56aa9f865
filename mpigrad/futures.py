"""`Future`: the one result-in-flight type, as `torch.futures.Future`.

Every asynchronous thing in mpigrad hands out a Future: a collective with `async_op=True`
(`distributed.Work` is a Future over MPI requests), a DDP communication hook, an RPC reply.
A Future is completed once, with a value (`set_result`) or an exception (`set_exception`),
by whichever thread learns the outcome; any thread may wait for it.

Some Futures complete only when someone drives them: a request-backed Future finishes when
MPI reports its requests done, and MPI only reports that when asked. Such a subclass
overrides `_progress(block)`, which `done()` calls with `block=False` (test once, never
wait) and `wait()` with `block=True` (return only once the Future is complete). A Future
made by `then()` drives its parent the same way, so `fut.then(f).wait()` progresses `fut`.
Futures completed by another thread (an RPC reply arriving on the listener thread) need no
`_progress`: `wait()` sleeps on a condition until `set_result` wakes it.
"""
import threading

__all__ = ["Future", "collect_all", "wait_all"]


class Future:
    """A value that will exist later. Thread-safe."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._completed = False
        self._result = None
        self._exception = None
        self._callbacks = []

    # ---- completing -------------------------------------------------------------------

    def set_result(self, result):
        """Complete the Future with `result`; callbacks run now, on this thread."""
        self._complete(result, None)

    def set_exception(self, exception):
        """Complete the Future with an error: `wait()` and `value()` raise it."""
        if not isinstance(exception, BaseException):
            raise TypeError(f"set_exception expects an exception, got {type(exception).__name__}")
        self._complete(None, exception)

    def _complete(self, result, exception):
        with self._cond:
            if self._completed:
                raise RuntimeError("this Future is already completed; a Future completes once")
            self._result, self._exception, self._completed = result, exception, True
            callbacks, self._callbacks = self._callbacks, []
            self._cond.notify_all()
        for callback in callbacks:
            callback(self)

    # ---- observing --------------------------------------------------------------------

    def done(self):
        """Whether the Future is complete (with a value or an error). Never blocks, but
        lets a request-backed Future progress."""
        if not self._completed:
            self._progress(block=False)
        return self._completed

    def wait(self, timeout=None):
        """Block until complete and return the value, or raise the Future's exception.
        `timeout` (seconds) bounds the wait for a Future completed by another thread;
        past it a TimeoutError is raised and the Future stays pending."""
        if not self._completed:
            self._progress(block=True)
        with self._cond:
            if not self._cond.wait_for(lambda: self._completed, timeout):
                raise TimeoutError(f"Future not completed within {timeout:g} s")
        return self.value()

    def value(self):
        """The value of a completed Future (raises its exception); an error if pending."""
        if not self._completed:
            raise RuntimeError("Future.value() called before the Future completed; use wait()")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self):
        """The exception a completed Future holds, or None."""
        return self._exception

    def add_done_callback(self, callback):
        """Run `callback(self)` once the Future completes (now, if it already has). The
        callback's own errors are its business: they are not caught here."""
        with self._cond:
            if not self._completed:
                self._callbacks.append(callback)
                return
        callback(self)

    def then(self, callback):
        """A new Future completed with `callback(self)` once this one completes; if this
        one failed or the callback raises, the new one holds that exception (a callback
        that calls `fut.value()` re-raises the parent's error, as in torch)."""
        child = _Chained(self)

        def run(parent):
            try:
                result = callback(parent)
            except BaseException as exc:  # handed to whoever waits on the child
                child.set_exception(exc)
            else:
                child.set_result(result)

        self.add_done_callback(run)
        return child

    def _progress(self, block):
        """Drive completion; see the module docstring. The base class is completed by
        whoever calls `set_result`, so there is nothing to drive."""

    @classmethod
    def completed(cls, value):
        """A Future that already holds `value`."""
        fut = cls()
        fut.set_result(value)
        return fut


class _Chained(Future):
    """The Future `then` returns: waiting on it drives its parent."""

    def __init__(self, parent):
        super().__init__()
        self._parent = parent

    def _progress(self, block):
        if block:
            self._parent._progress(block=True)
        else:
            self._parent.done()


def collect_all(futures):
    """A Future whose value is the list `futures`, completed once every one of them is
    (each may hold a value or an error: inspect them with `value()`)."""
    futures = list(futures)
    combined = _Gathered(futures)
    if not futures:
        combined.set_result([])
        return combined
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            combined.set_result(futures)

    for fut in futures:
        fut.add_done_callback(one_done)
    return combined


class _Gathered(Future):
    def __init__(self, futures):
        super().__init__()
        self._futures = futures

    def _progress(self, block):
        for fut in self._futures:
            if block:
                fut._progress(block=True)
            else:
                fut.done()


def wait_all(futures):
    """Wait for every Future and return their values in order; raises the first error."""
    return [fut.wait() for fut in collect_all(futures).wait()]
