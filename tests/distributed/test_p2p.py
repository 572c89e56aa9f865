"""Point-to-point messages: blocking and nonblocking, any source, tags, size mismatches."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist

from ._helpers import assert_matches, rank_input

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(autouse=True)
def separate_tests():
    # Without it a fast rank's message for the next test can match a receive from any source
    # that is still waiting in this one.
    yield
    dist.barrier()


def test_any_source_returns_the_sender(rank, size):
    if rank == 0:
        senders = set()
        for _ in range(size - 1):
            buf = np.zeros(3)
            sender = dist.recv(buf)
            assert_matches(buf, rank_input(sender, (3,)))
            senders.add(sender)
        assert senders == set(range(1, size))
    else:
        dist.send(rank_input(rank, (3,)), dst=0)


def test_irecv_from_any_source_reports_the_sender(rank, size):
    if rank == 0:
        bufs = [np.zeros(2, np.int32) for _ in range(size - 1)]
        works = [dist.irecv(buf) for buf in bufs]
        for buf, work in zip(bufs, works):
            assert_matches(buf if work.wait() else None, rank_input(work.source_rank(), (2,),
                                                                    np.int32))
        assert sorted(w.source_rank() for w in works) == list(range(1, size))
    else:
        dist.isend(rank_input(rank, (2,), np.int32), dst=0).wait()


def test_tags_select_messages(rank):
    if rank == 0:
        dist.send(np.full(2, 1.0), dst=1, tag=1)
        dist.send(np.full(2, 2.0), dst=1, tag=2)
    elif rank == 1:
        second, first = np.zeros(2), np.zeros(2)
        dist.recv(second, src=0, tag=2)  # posted first, matches the later message
        dist.recv(first, src=0, tag=1)
        assert_matches(second, np.full(2, 2.0))
        assert_matches(first, np.full(2, 1.0))


def test_tensor_receive_bumps_version(rank):
    if rank == 0:
        dist.send(mg.arange(4, dtype=mg.float64), dst=1)
    elif rank == 1:
        t = mg.zeros(4, dtype=mg.float64)
        version = t._version
        assert dist.recv(t, src=0) == 0
        assert t._version == version + 1
        assert_matches(t._array, np.arange(4.0))


@pytest.mark.parametrize("sent", [3, 5], ids=["shorter", "longer"])
@pytest.mark.parametrize("blocking", [True, False], ids=["recv", "irecv"])
def test_message_of_the_wrong_size(sent, blocking, rank):
    if rank == 0:
        dist.send(np.zeros(sent), dst=1)
    elif rank == 1:
        buf = np.zeros(4)
        message = "received 24 bytes from rank 0" if sent == 3 else "from rank 0 is larger"
        with pytest.raises(dist.MessageMismatchError, match=message + ".*shape \\(4,\\)"):
            if blocking:
                dist.recv(buf, src=0)
            else:
                dist.irecv(buf, src=0).wait()


def test_is_completed_drives_progress(rank):
    if rank == 0:
        work = dist.isend(np.arange(1 << 16, dtype=np.float32), dst=1)
    elif rank == 1:
        buf = np.zeros(1 << 16, np.float32)
        work = dist.irecv(buf, src=0)
    else:
        return
    while not work.is_completed():
        pass
    if rank == 1:
        assert_matches(buf, np.arange(1 << 16, dtype=np.float32))


def test_peer_outside_the_group(rank, size):
    group = dist.new_group([0])
    if rank == 0:
        with pytest.raises(ValueError, match="dst=1 is not a member of the group of global ranks"):
            dist.send(np.zeros(1), dst=1, group=group)
    dist.destroy_process_group(group)
