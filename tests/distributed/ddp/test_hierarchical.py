"""The other ways to sum a bucket equal the flat allreduce: the hierarchical allreduce
(inside hosts, across hosts, back) for every way of grouping the ranks into hosts on this
machine, and mpigrad's own ring of nonblocking messages. Bit for bit on integer-valued
gradients (every order of summation is then exact), to 1e-10 through DDP training."""
import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    HierarchicalState, allreduce_hook, hierarchical_allreduce_hook, ring_allreduce_hook)
from mpigrad.distributed.algorithms.ddp_comm_hooks.hierarchical import CROSS_HOST_ENV, Hierarchy, cross_host_algorithm
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

from ._models import MLP, mse, params_of, regression_data

# id -> (hook, a function making a fresh state for it)
REDUCTIONS = {
    "hosts-of-1": (hierarchical_allreduce_hook, lambda: HierarchicalState(1)),
    "hosts-of-2": (hierarchical_allreduce_hook, lambda: HierarchicalState(2)),
    "hosts-of-3": (hierarchical_allreduce_hook, lambda: HierarchicalState(3)),
    "shared-memory-hosts": (hierarchical_allreduce_hook, lambda: HierarchicalState(None)),
    "ring": (ring_allreduce_hook, lambda: None),
    # The ring between hosts, as DDP's default takes it where it beat the library.
    "hosts-of-1-ring-across": (hierarchical_allreduce_hook,
                               lambda: HierarchicalState(1, across_hosts="ring")),
    "hosts-of-2-ring-across": (hierarchical_allreduce_hook,
                               lambda: HierarchicalState(2, across_hosts="ring")),
}


def train(rank, hook=None, state=None, steps=3, bucket_cap_mb=300 / 2**20):
    model = DDP(MLP(seed=0), bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        model.register_comm_hook(state, hook)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        opt.zero_grad()
        x, y = regression_data(4, seed=100 * s + rank)
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        opt.step()
    return params_of(model), model


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_training_equals_flat(rank, size, reduction):
    hook, make_state = REDUCTIONS[reduction]
    flat, _ = train(rank, allreduce_hook)
    state = make_state()
    got, model = train(rank, hook, state)
    assert len(model.reducer.buckets) > 1  # several buckets in flight through the rounds
    ranks_per_host = getattr(state, "ranks_per_host", None)
    if ranks_per_host is not None:
        hosts = -(-size // ranks_per_host)
        assert state.hierarchy.host_sizes == [min(ranks_per_host, size - h * ranks_per_host)
                                              for h in range(hosts)]
    for a, b in zip(got, flat):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    joined = np.concatenate([p.ravel() for p in got])
    assert all(np.array_equal(j, joined) for j in MPI.COMM_WORLD.allgather(joined))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_integer_sums_are_bit_identical(rank, size, reduction):
    """Gradients of whole numbers: any order of summation gives the exact sum, so the result
    must equal the flat one bit for bit."""
    def with_integer_gradients(hook):
        def wrapped(state, bucket):
            buf = bucket.buffer()
            buf[...] = np.random.default_rng([rank, bucket.index()]).integers(-999, 999, buf.size)
            return hook(state, bucket)
        return wrapped

    hook, make_state = REDUCTIONS[reduction]
    results = {}
    for name, reduce_hook, state in (("flat", allreduce_hook, None),
                                     (reduction, hook, make_state())):
        model = DDP(MLP(seed=0), bucket_cap_mb=300 / 2**20)
        model.register_comm_hook(state, with_integer_gradients(reduce_hook))
        x, y = regression_data(4, seed=rank)
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        results[name] = [p.grad._array.copy() for p in model.parameters()]
    for a, b in zip(results[reduction], results["flat"]):
        assert np.array_equal(a, b)


@pytest.mark.mpi(min_size=2)
def test_one_machine_is_one_host(rank, size):
    hierarchy = Hierarchy(dist.group.WORLD.comm, dist.group.WORLD)
    assert hierarchy.host_sizes == [size] and not hierarchy.spans_shared_hosts
    # What DDP builds: nothing is kept when the hierarchy would not be used.
    unused = Hierarchy(dist.group.WORLD.comm, dist.group.WORLD, only_if_useful=True)
    assert unused.host_sizes == [size] and unused.host_reduce is None


@pytest.mark.mpi(min_size=2)
def test_hosts_of_1_ring_across_really_takes_the_ring(rank, size):
    state = HierarchicalState(1, across_hosts="ring")
    train(rank, hierarchical_allreduce_hook, state, steps=1)
    assert state.hierarchy.ring_across_hosts


@pytest.mark.mpi(min_size=2)
def test_timed_choice_is_the_same_on_every_rank(rank, size):
    comm = dist.group.WORLD.comm
    choice = cross_host_algorithm(comm, "auto")
    assert choice in ("mpi", "ring")
    assert comm.allgather(choice) == [choice] * size


@pytest.mark.mpi(min_size=2)
def test_a_choice_that_differs_between_ranks_is_refused_on_every_rank(rank, size):
    with pytest.raises(ValueError, match=r"alike on every rank; ranks said \['mpi', 'ring'"):
        cross_host_algorithm(dist.group.WORLD.comm, "mpi" if rank == 0 else "ring")


def test_an_unknown_choice_is_refused(monkeypatch):
    monkeypatch.setenv(CROSS_HOST_ENV, "fastest")
    with pytest.raises(ValueError, match="must be one of"):
        cross_host_algorithm(dist.group.WORLD.comm)
