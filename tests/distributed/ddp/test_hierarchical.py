"""Hierarchical allreduce (inside hosts, across hosts, back) equals the flat allreduce: bit
for bit on integer-valued gradients (every order of summation is exact), to 1e-10 through
DDP training, for every way of grouping the ranks into hosts on this machine."""
import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    HierarchicalState, allreduce_hook, hierarchical_allreduce_hook)
from mpigrad.distributed.hierarchical import Hierarchy
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

from ._models import MLP, mse, params_of, regression_data


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
@pytest.mark.parametrize("ranks_per_host", [1, 2, 3])
def test_hierarchical_training_equals_flat(rank, size, ranks_per_host):
    flat, _ = train(rank)
    state = HierarchicalState(ranks_per_host=ranks_per_host)
    got, model = train(rank, hierarchical_allreduce_hook, state)
    assert len(model.reducer.buckets) > 1  # several buckets in flight through the rounds
    hosts = -(-size // ranks_per_host)
    assert state.hierarchy.host_sizes == [min(ranks_per_host, size - h * ranks_per_host)
                                          for h in range(hosts)]
    for a, b in zip(got, flat):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    joined = np.concatenate([p.ravel() for p in got])
    assert all(np.array_equal(j, joined) for j in MPI.COMM_WORLD.allgather(joined))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("ranks_per_host", [1, 2, 3, None])
def test_integer_sums_are_bit_identical(rank, size, ranks_per_host):
    """Gradients of whole numbers: any order of summation gives the exact sum, so the
    hierarchical result must equal the flat one bit for bit."""
    def with_integer_gradients(hook):
        def wrapped(state, bucket):
            buf = bucket.buffer()
            buf[...] = np.random.default_rng([rank, bucket.index()]).integers(-999, 999, buf.size)
            return hook(state, bucket)
        return wrapped

    results = {}
    for name, hook, state in (("flat", allreduce_hook, None),
                              ("hierarchical", hierarchical_allreduce_hook,
                               HierarchicalState(ranks_per_host))):
        model = DDP(MLP(seed=0), bucket_cap_mb=300 / 2**20)
        model.register_comm_hook(state, with_integer_gradients(hook))
        x, y = regression_data(4, seed=rank)
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        results[name] = [p.grad.data.copy() for p in model.parameters()]
    for a, b in zip(results["hierarchical"], results["flat"]):
        assert np.array_equal(a, b)


@pytest.mark.mpi(min_size=2)
def test_one_machine_is_one_host(rank, size):
    hierarchy = Hierarchy(dist.group.WORLD.comm, dist.group.WORLD)
    assert hierarchy.host_sizes == [size] and not hierarchy.spans_shared_hosts
