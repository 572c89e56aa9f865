"""Test files the plugin's tests run under their own mpiexec (tests/testing/test_plugin.py);
each is written into a fresh directory as a test module of its own."""

# The example, the variant failing before a collective, and a test after each that
# must see the right values; then a skip on some ranks, and the helpers on several ranks.
ISOLATION = '''
import pytest
import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.testing import assert_same_on_all_ranks


@pytest.fixture(autouse=True)
def group(process_group):
    return process_group


def total():
    return float(sum(range(1, dist.get_world_size() + 1)))


def test_a():
    t = mg.ones(4); dist.all_reduce(t)
    if dist.get_rank() == 1:
        raise ValueError("rank 1 only")
    dist.all_reduce(t)


def test_b():
    t = mg.full((4,), float(dist.get_rank() + 1)); dist.all_reduce(t)
    assert t.tolist() == [total()] * 4


def test_assert_before_collective():
    t = mg.ones(4)
    assert dist.get_rank() != 1, "rank 1 fails first"
    dist.all_reduce(t)


def test_after_assert():
    t = mg.full((4,), float(dist.get_rank() + 1)); dist.all_reduce(t)
    assert t.tolist() == [total()] * 4


def test_recv_from_a_rank_that_failed():
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 sends nothing")
    if dist.get_rank() == 0:
        dist.recv(mg.zeros(2), src=1)


def test_skipped_on_rank_0_only():
    if dist.get_rank() == 0:
        pytest.skip("rank 0 skips")


def test_skipped_everywhere():
    pytest.skip("every rank skips")


def test_same_on_all_ranks_passes():
    assert_same_on_all_ranks({"w": mg.ones(3), "b": mg.zeros(2)})


def test_same_on_all_ranks_reports_the_rank():
    w = mg.ones(3)
    if dist.get_rank() == 1:
        w.data[1] += 0.5
    with pytest.raises(AssertionError) as error:
        assert_same_on_all_ranks({"w": w, "b": mg.zeros(2)})
    assert "rank 1 differs from rank 0" in str(error.value)
    assert "'w': 1 of 3 elements differ, by up to 0.5" in str(error.value)
    assert "'b'" not in str(error.value)


def test_shared_tmp_path(shared_tmp_path):
    (shared_tmp_path / f"rank{dist.get_rank()}").write_text("x")
    dist.barrier()
    assert sorted(p.name for p in shared_tmp_path.iterdir()) == [
        f"rank{r}" for r in range(dist.get_world_size())]


@pytest.fixture
def fails_on_rank_1():
    if dist.get_rank() == 1:
        raise ValueError("setup fails on rank 1")


def test_setup_fails_on_rank_1(fails_on_rank_1):
    pass


@pytest.fixture
def reduced_at_teardown():
    yield
    if dist.get_rank() == 0:  # a message first, then a collective
        dist.send(mg.full((2,), 7.0), dst=1)
    elif dist.get_rank() == 1:
        received = mg.zeros(2); dist.recv(received, src=0)
        assert received.tolist() == [7.0, 7.0]
    t = mg.ones(2); dist.all_reduce(t)
    assert t.tolist() == [float(dist.get_world_size())] * 2


def test_teardown_collective_after_a_failure(reduced_at_teardown):
    t = mg.ones(2); dist.all_reduce(t)
    assert dist.get_rank() != 1, "rank 1 fails the call"
    dist.all_reduce(t)


@pytest.fixture
def teardown_fails_on_rank_1():
    yield
    if dist.get_rank() == 1:
        raise RuntimeError("teardown fails on rank 1")


def test_teardown_fails_on_rank_1(teardown_fails_on_rank_1):
    pass


def test_last():
    t = mg.full((4,), float(dist.get_rank() + 1)); dist.all_reduce(t)
    assert t.tolist() == [total()] * 4
'''

HANG = '''
import pytest
import mpigrad as mg
import mpigrad.distributed as dist


@pytest.fixture
def reduced_at_teardown(process_group):
    yield
    t = mg.ones(2); dist.all_reduce(t)
    assert t.tolist() == [float(dist.get_world_size())] * 2


@pytest.mark.mpi_timeout(2)
def test_hang(reduced_at_teardown):
    t = mg.ones(4)
    if dist.get_rank() == 1:
        while True:
            pass
    dist.all_reduce(t)


def test_after_hang(process_group):
    t = mg.full((4,), float(dist.get_rank() + 1)); dist.all_reduce(t)
    assert t.tolist() == [float(sum(range(1, dist.get_world_size() + 1)))] * 4
'''

COLLECTION = '''
import os

def test_everywhere():
    pass

if os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK")) == "0":
    def test_only_on_rank_0():
        pass

def test_after():
    pass
'''

WORLD = '''
import pytest
import mpigrad as mg
import mpigrad.distributed as dist


@pytest.mark.world(3)
def test_three_ranks(process_group):
    t = mg.full((2,), float(dist.get_rank()))
    dist.all_reduce(t)
    assert dist.get_world_size() == 3 and t.tolist() == [3.0, 3.0]


@pytest.mark.world(2)
def test_fails_on_rank_1(process_group):
    assert dist.get_rank() == 0, "rank 1 is not rank 0"


def test_plain():
    pass
'''
