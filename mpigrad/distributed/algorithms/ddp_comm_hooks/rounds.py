"""A reduction in several rounds of messages, as one Future.

Some hooks cannot reduce a bucket with one MPI call: PowerSGD reduces P, computes Q from it
and reduces Q; a hierarchical allreduce reduces inside each host, then across hosts, then
broadcasts back. Such a hook is written as a generator that yields the requests of each
round and returns the bucket's result; `rounds(bucket, what, generator)` turns it into the
Future the hook returns. Each `done()` (the Reducer calls it from later gradient hooks)
follows every round whose requests have finished with the next, never blocking; `wait()` runs
the rest, each round's wait under the process group's watchdog (through `bucket.future`).
The generator's local variables keep the round's buffers alive.

Collectives must be started in the same order on every rank of a communicator, but rounds
finish when MPI says so, which differs between ranks: bucket 1's first round may finish
before bucket 0's on one rank and after it on another. Two rules keep the order fixed:

- each round number has a communicator of its own (`bucket.round_comms(n)`: round 1
  may use `bucket.comm`, later ones duplicates of it), so the collectives on one
  communicator are those of one round, and
- a bucket starts round k only after every earlier bucket (in launch order) has started it
  or finished, so on each communicator they start in bucket order.

Point-to-point rounds (a ring) need no such care if their tags are distinct per bucket.
"""
from ....futures import Future

__all__ = ["rounds"]

def rounds(bucket, what, steps):
    """The Future of the generator `steps` (see the module docstring)."""
    return _Rounds(bucket, what, steps)


class _Rounds(Future):
    def __init__(self, bucket, what, steps):
        super().__init__()
        self._bucket, self._what, self._steps = bucket, what, steps
        self._round = 0
        self._work = None
        self._progressing = False
        self._earlier = bucket.rounds_in_flight
        self._earlier[:] = [f for f in self._earlier if not f._completed]
        self._earlier.append(self)
        self._advance()

    def _may_start_next_round(self, block):
        """Whether every earlier bucket has started the round this one is about to start
        (or finished); with `block`, drives them until they have."""
        # A copy: driving an earlier bucket may finish it, which takes it off the list.
        for earlier in tuple(self._earlier):
            if earlier is self:
                return True
            while not earlier._completed and earlier._round <= self._round:
                if not block:
                    if not earlier.done() and earlier._round <= self._round:
                        return False
                else:
                    earlier._progress(block=True)
        return True

    def _advance(self):
        """Run the generator up to its next round (or its end)."""
        try:
            requests = next(self._steps)
        except StopIteration as stop:
            self._finish(stop.value, None)
            return
        except Exception as exc:  # the hook's own error, handed to whoever waits
            self._finish(None, exc)
            return
        self._round += 1
        self._work = self._bucket.future(f"{self._what} (round {self._round})", requests,
                                         lambda: None)

    def _finish(self, value, exception):
        self._work = None
        if self in self._earlier:
            self._earlier.remove(self)
        if exception is None:
            self.set_result(value)
        else:
            self.set_exception(exception)

    def _progress(self, block):
        # Driving an earlier bucket runs its completion callbacks, and one may ask this
        # Future again (the Reducer polls every bucket): that inner call must not advance
        # the generator under this loop, which would start a round twice or finish twice.
        if self._progressing:
            return
        self._progressing = True
        try:
            while not self._completed:
                if block:
                    self._work._progress(block=True)
                elif not self._work.done():
                    return
                if self._work.exception() is not None:
                    self._finish(None, self._work.exception())
                    return
                if not self._may_start_next_round(block):
                    return
                self._advance()
        finally:
            self._progressing = False
