import pytest

from mpigrad.data import DistributedSampler

CASES = [
    (n, replicas, drop_last)
    for n in (0, 1, 7, 10, 12)
    for replicas in (1, 3, 4)
    for drop_last in (False, True)
]


def _shares(n, replicas, **kwargs):
    samplers = [DistributedSampler(range(n), replicas, rank, **kwargs) for rank in range(replicas)]
    return [list(sampler) for sampler in samplers]


@pytest.mark.parametrize("n, replicas, drop_last", CASES)
def test_equal_shares_that_cover_the_dataset(n, replicas, drop_last):
    shares = _shares(n, replicas, drop_last=drop_last, seed=3)
    expected = n // replicas if drop_last else -(-n // replicas)
    assert [len(s) for s in shares] == [expected] * replicas
    assert len(DistributedSampler(range(n), replicas, 0, drop_last=drop_last)) == expected
    seen = [i for s in shares for i in s]
    if drop_last:
        assert len(set(seen)) == len(seen) == replicas * (n // replicas)
    else:
        assert set(seen) == set(range(n))


@pytest.mark.parametrize("n, replicas, drop_last", CASES)
def test_unshuffled_shares_match_pytorch(n, replicas, drop_last):
    torch_data = pytest.importorskip("torch.utils.data")
    ours = _shares(n, replicas, shuffle=False, drop_last=drop_last)
    theirs = [
        list(torch_data.DistributedSampler(range(n), replicas, rank, False, drop_last=drop_last))
        for rank in range(replicas)
    ]
    assert ours == theirs


def test_padding_repeats_the_shuffled_order_from_its_start():
    sampler = [DistributedSampler(range(10), 4, r, seed=1) for r in range(4)]
    interleaved = [i for group in zip(*map(list, sampler)) for i in group]
    assert interleaved[10:] == interleaved[:2]
    assert sorted(interleaved[:10]) == list(range(10)) and interleaved[:10] != list(range(10))


def test_padding_wraps_several_times_when_the_dataset_is_tiny():
    assert _shares(2, 5, shuffle=False) == [[0], [1], [0], [1], [0]]


def test_order_depends_on_seed_and_epoch_only():
    sampler = DistributedSampler(range(50), 2, 1, seed=5)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    other = DistributedSampler(range(50), 2, 1, seed=5)
    other.set_epoch(1)
    assert list(other) == second
    assert list(DistributedSampler(range(50), 2, 1, seed=6)) != first


def test_seed_and_epoch_do_not_alias():
    # With seed + epoch as the only input, (seed 0, epoch 1) would repeat (seed 1, epoch 0).
    a = DistributedSampler(range(50), 1, 0, seed=0)
    a.set_epoch(1)
    assert list(a) != list(DistributedSampler(range(50), 1, 0, seed=1))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_replicas=2, rank=2), r"Invalid rank 2, rank should be in the interval \[0, 1\]"),
        (dict(num_replicas=0, rank=0), "num_replicas should be an integer >= 1"),
        (dict(num_replicas=2, rank=-1), "rank should be an integer >= 0"),
        (dict(num_replicas=2, rank=0, seed=-1), "seed should be an integer >= 0"),
        (dict(num_replicas=2, rank=0, shuffle="no"), "shuffle should be a boolean"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DistributedSampler(range(4), **kwargs)


def test_defaults_need_an_initialized_process_group(monkeypatch):
    from mpigrad import distributed as dist

    # An earlier test of this process may have started the default group: seen as not yet.
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedSampler(range(4))


@pytest.mark.mpi(min_size=2)
def test_ranks_shares_are_disjoint_up_to_padding():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 4 * size + 1
    sampler = DistributedSampler(range(n), num_replicas=size, rank=rank, seed=21)
    sampler.set_epoch(3)
    shares = comm.allgather(list(sampler))
    assert len({len(share) for share in shares}) == 1
    seen = [i for share in shares for i in share]
    assert set(seen) == set(range(n))
    assert len(seen) - len(set(seen)) == sampler.total_size - n


@pytest.fixture
def process_group():
    """The default process group, started here unless a test session already runs one
    (tests/distributed starts one for the whole session)."""
    from mpigrad import distributed as dist

    started_here = not dist.is_initialized()
    if started_here:
        dist.init_process_group()
    yield dist
    if started_here:
        dist.destroy_process_group()


@pytest.mark.mpi(min_size=2)
def test_defaults_come_from_the_process_group(process_group):
    from mpi4py import MPI

    sampler = DistributedSampler(range(10))
    comm = MPI.COMM_WORLD
    assert (sampler.num_replicas, sampler.rank) == (comm.Get_size(), comm.Get_rank())
    assert sampler.rank == process_group.get_rank()
    shares = comm.allgather(list(sampler))
    assert set().union(*shares) == set(range(10))
