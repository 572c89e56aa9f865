"""The communication-hook contract of DistributedDataParallel: `GradBucket`.

A hook is `hook(state, bucket) -> Future`, registered with `ddp.register_comm_hook(state,
hook)`. The Reducer calls it once per bucket per backward, in bucket order on every rank, as
soon as the bucket is full. `bucket.buffer()` is the bucket's flat numpy array holding this
rank's gradients *already divided by the world size*, so a hook only has to sum over ranks.
The Future's value (what `wait()` returns) must be an array of the buffer's size and dtype
holding that sum (it may be the buffer itself); the Reducer copies it into the parameters'
gradients. For a bucket holding one large parameter the buffer is that parameter's `.grad`
array viewed flat (see reducer.py), so a hook that reduces in place writes the gradient
directly; either way a hook must not keep the buffer once its Future has finished.

Hooks work on numpy arrays and run their MPI operations on `bucket.comm`, DDP's own
communicator, with nonblocking calls, and return `bucket.future(what, requests,
on_complete)`: the `Work` of those requests (an `mpigrad.futures.Future`), made there
directly, whose `wait()` runs under the process group's watchdog. The Reducer calls
`future.done()` from later gradient hooks, which is what lets MPI progress the reduction
while backward continues. Any other Future (`then()` of a Work, or one completed by hand)
works too; the Reducer waits for it under the watchdog. The hook is given the same
GradBucket for a bucket at every iteration (until the layout is rebuilt), its buffer and
gradients read anew at each call.

The hooks themselves are in `algorithms.ddp_comm_hooks`, at PyTorch's module paths; DDP's
default is `default_hooks.hierarchical_allreduce_hook` with a state DDP makes (one Iallreduce
unless ranks share hosts).
"""

from ..work import Work

__all__ = ["GradBucket"]


class GradBucket:
    """What a comm hook is given: one bucket of gradients, the same object every iteration
    (made when the Reducer lays its buckets out, read through at each call).

    `index()` its position in the launch order, `buffer()` the flat array (this rank's
    gradients divided by the world size), `parameters()` the Parameters it holds,
    `gradients()` views of the buffer shaped like them, `is_last()` whether it is the last
    bucket. `comm` is the communicator to run the reduction on, `world_size` its size,
    `process_group` the group DDP runs on; `future()` makes the Work of the reduction's
    requests, and `rounds_in_flight` is where a hook reducing in several rounds keeps them in
    launch order (rounds.py; the Reducer owns the list). `shared` is the `SharedBuckets` the
    buffer lives in where ranks share hosts (see algorithms/ddp_comm_hooks/shared_memory.py),
    else None.
    """

    def __init__(self, bucket, reducer):
        self._bucket = bucket  # the Reducer's: its buffer may change between iterations
        self._parameters = [reducer.params[i] for i in bucket.members]
        self._is_last = bucket.index == len(reducer.buckets) - 1
        self._channel = reducer.channel
        self.world_size = reducer.world_size
        self.process_group = reducer.channel.process_group
        self.rounds_in_flight = reducer.rounds_in_flight
        self.shared = reducer.shared

    @property
    def comm(self):
        return self._channel.comm  # looked up per call: it raises once the group is destroyed

    def index(self):
        return self._bucket.index

    def buffer(self):
        return self._bucket.buffer

    def parameters(self):
        return list(self._parameters)

    def gradients(self):
        return list(self._bucket.views)

    def is_last(self):
        return self._is_last

    def round_comms(self, n):
        """`n` communicators for a hook's rounds (see rounds.py): `comm`, then duplicates
        of it that DDP makes once and frees with its own."""
        return self._channel.round_comms(n)

    def future(self, what, requests, on_complete, keep_alive=()):
        """The Work a hook returns for `requests` started on `comm`: once they finish,
        `on_complete()` runs and returns the reduced array. `keep_alive` holds arrays MPI
        still reads or writes. `what` names the reduction in the watchdog's message."""
        return Work(self.process_group,
                    f"DistributedDataParallel: {what} of bucket {self._bucket.index}", requests,
                    on_complete=lambda statuses: on_complete(), keep_alive=keep_alive)
