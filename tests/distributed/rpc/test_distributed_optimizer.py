"""DistributedOptimizer: several steps over a split model equal a local optimizer's steps
on the same model in one process (float64, 1e-10); an owner's error reaches the caller."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed.autograd as dist_autograd
import mpigrad.distributed.rpc as rpc
from mpigrad.distributed.optim import DistributedOptimizer

from . import _remote
from .conftest import bounded

pytestmark = pytest.mark.mpi(min_size=2)
NAMES = ("W0", "W1", "W2")


def _param_rrefs():
    owners = _remote.state["owners"]
    return [rpc.RRef(_remote.param(n)) if owners[n] == 0 else
            rpc.rpc_sync(owners[n], _remote.param_rref, args=(n,)) for n in NAMES]


def _local_training(optimizer_class, inputs, **hyper):
    params = {n: mg.tensor(a.copy(), requires_grad=True)
              for n, a in _remote.state["arrays"].items()}

    def stage1(h):
        t = mg.tanh(h @ params["W1"])
        return mg.sigmoid(t @ params["W2"]) + t.sum(), t * 3.0

    optimizer = optimizer_class([params[n] for n in NAMES], **hyper)
    losses = []
    for x in inputs:
        optimizer.zero_grad()
        loss = _remote.split_loss(mg.tensor(x), params["W0"], lambda: params["W1"], stage1)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {n: p._array for n, p in params.items()}


@pytest.mark.parametrize("optimizer_class, hyper", [
    (mg.optim.SGD, dict(lr=0.05, momentum=0.9)),
    (mg.optim.Adam, dict(lr=0.01)),
])
def test_steps_match_a_local_optimizer(model, optimizer_class, hyper):
    rank, _ = model
    if rank != 0:
        return
    inputs = [np.random.default_rng(s).standard_normal((5, 4)) for s in range(4)]
    expected_losses, expected = _local_training(optimizer_class, inputs, **hyper)
    optimizer = DistributedOptimizer(optimizer_class, _param_rrefs(), **hyper)
    losses = []
    with bounded(120):
        for x in inputs:
            with dist_autograd.context() as context_id:
                loss = _remote.distributed_split_loss(mg.tensor(x))
                dist_autograd.backward(context_id, [loss])
                optimizer.step(context_id)
            losses.append(loss.item())
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-10, atol=1e-10)
    for name in NAMES:
        value = rpc.rpc_sync(_remote.state["owners"][name], _remote.param, args=(name,))
        np.testing.assert_allclose(value._array, expected[name], rtol=1e-10, atol=1e-10)


def test_an_owner_error_reaches_the_caller(model):
    rank, _ = model
    if rank != 0:
        return
    optimizer = DistributedOptimizer(_remote.FailingSGD, _param_rrefs(), lr=0.1)
    with bounded(60), dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [_remote.distributed_split_loss(mg.tensor(
            np.ones((5, 4))))])
        with pytest.raises(RuntimeError, match="(?s)refuses to step.*worker 'worker"):
            optimizer.step(context_id)


def test_parameters_must_be_rrefs(model):
    with pytest.raises(TypeError, match=r"params_rref\[0\] must be an RRef"):
        DistributedOptimizer(mg.optim.SGD, [_remote.param("W0")], lr=0.1)
