"""rounds.py's Future of a multi-round reduction, driven by hand: fake buckets whose requests
finish when the test says, so the order in which Futures progress is the test's choice."""
from mpigrad.distributed.algorithms.ddp_comm_hooks.rounds import rounds
from mpigrad.futures import Future


class _Requests(Future):
    """A round's requests: finished when the test completes it."""

    def _progress(self, block):
        if block and not self._completed:
            self.set_result(None)


class _Bucket:
    def __init__(self, in_flight):
        self.rounds_in_flight = in_flight
        self.started = []

    def future(self, what, requests, on_complete):
        self.started.append(what)
        return requests


def _one_round(requests, result):
    yield requests
    return result


def test_a_callback_asking_a_later_bucket_again_neither_finishes_it_twice_nor_skips_a_round():
    # The Reducer polls every bucket's Future from its hooks, and a Future's callbacks run when
    # it completes. Here the earlier bucket completes while the later one is deciding whether
    # it may go on, and its callback asks the later one again: the later one finishes once.
    in_flight = []
    first_requests, second_requests = _Requests(), _Requests()
    first = rounds(_Bucket(in_flight), "first", _one_round(first_requests, "a"))
    second_bucket = _Bucket(in_flight)
    second = rounds(second_bucket, "second", _one_round(second_requests, "b"))
    first.add_done_callback(lambda _: second.done())
    first_requests.set_result(None)
    second_requests.set_result(None)
    assert second.done()
    assert (first.value(), second.value()) == ("a", "b")
    assert second_bucket.started == ["second (round 1)"]
    assert in_flight == []


def _rounds_of(*requests):
    for round_requests in requests:
        yield round_requests


def test_an_earlier_bucket_finishing_mid_check_does_not_hide_the_next_one():
    # Bucket 2 may start round 2 only once buckets 0 and 1 have started it or finished.
    # Checking them finishes bucket 0 (its only round is done), which leaves the list of
    # buckets in flight; bucket 1, still in round 1, must still hold bucket 2 back.
    in_flight = []
    buckets = [_Bucket(in_flight) for _ in range(3)]
    first_rounds = [_Requests() for _ in range(3)]
    rounds(buckets[0], "b0", _rounds_of(first_rounds[0]))
    later = [rounds(buckets[i], f"b{i}", _rounds_of(first_rounds[i], _Requests()))
             for i in (1, 2)]
    first_rounds[0].set_result(None)
    first_rounds[2].set_result(None)
    assert not later[1].done()
    assert buckets[2].started == ["b2 (round 1)"]
    first_rounds[1].set_result(None)
    assert not later[1].done()
    assert buckets[1].started == ["b1 (round 1)", "b1 (round 2)"]
    assert buckets[2].started == ["b2 (round 1)", "b2 (round 2)"]
