"""Differentiable collectives against a single-process oracle.

Each rank computes its loss L_r from the collective's outputs; the oracle recomputes, in one
process with the same autograd, every rank's outputs from all ranks' inputs and
differentiates sum_r L_r. This rank's gradients must match the oracle's gradients for this
rank's inputs (float64 throughout)."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.nn as dnn
import mpigrad.distributed.nn.functional as functional
from mpigrad.distributed import ReduceOp

from .._helpers import assert_matches, rank_input


def _leaves(r, shapes):
    return [mg.tensor(rank_input(r, shape, seed=10 + k), requires_grad=True)
            for k, shape in enumerate(shapes)]


def _loss(r, outputs):
    """Rank r's loss: a fixed random weighting of its outputs (different on every rank)."""
    total = 0
    for k, out in enumerate(outputs):
        total = total + (mg.tensor(rank_input(r, out.shape, seed=100 + k)) * out).sum()
    return total


def _check_gradients(shapes, distributed, oracle):
    """`distributed(inputs)` gives this rank's outputs; `oracle(inputs_of_every_rank)` gives
    every rank's outputs."""
    rank, size = dist.get_rank(), dist.get_world_size()
    inputs = _leaves(rank, shapes(rank))
    outputs = distributed(inputs)
    _loss(rank, outputs).backward()

    everyone = [_leaves(r, shapes(r)) for r in range(size)]
    sum(_loss(r, outs) for r, outs in enumerate(oracle(everyone))).backward()
    for mine, expected in zip(inputs, everyone[rank]):
        unused = expected.grad is None  # the oracle never touched this input
        assert_matches(mine.grad._array, np.zeros(mine.shape) if unused else expected.grad._array)
    return outputs


def _same(shape):
    return lambda r: [shape]


def test_all_gather():
    outputs = _check_gradients(_same((2, 3)), lambda x: dnn.all_gather(x[0]),
                               lambda X: [[x[0] for x in X]] * len(X))
    for r, out in enumerate(outputs):
        assert_matches(out._array, rank_input(r, (2, 3), seed=10))


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN,
                                ReduceOp.PRODUCT])
def test_all_reduce(op):
    combine = {ReduceOp.SUM: lambda a, b: a + b, ReduceOp.AVG: lambda a, b: a + b,
               ReduceOp.MAX: mg.maximum, ReduceOp.MIN: mg.minimum,
               ReduceOp.PRODUCT: lambda a, b: a * b}[op]

    def oracle(X):
        y = X[0][0]
        for x in X[1:]:
            y = combine(y, x[0])
        if op is ReduceOp.AVG:
            y = y / len(X)
        return [[y]] * len(X)

    _check_gradients(_same((3, 2)), lambda x: [dnn.all_reduce(x[0], op)], oracle)


def test_all_reduce_max_splits_ties_evenly(size):
    x = mg.tensor([1.0, 2.0], dtype=mg.float64, requires_grad=True)
    dnn.all_reduce(x, ReduceOp.MAX).sum().backward()
    # Every rank holds the maximum: the summed gradient (size) is shared by size ranks.
    assert_matches(x.grad._array, np.ones(2))


def test_broadcast(size):
    src = size - 1
    _check_gradients(_same((4,)), lambda x: [dnn.broadcast(x[0], src)],
                     lambda X: [[X[src][0]]] * len(X))


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG])
def test_reduce(op, size):
    dst = size - 1

    def oracle(X):
        total = sum(x[0] for x in X[1:]) + X[0][0]
        if op is ReduceOp.AVG:
            total = total / len(X)
        # Off dst the result is a copy of the input whose gradient is ignored.
        return [[total if r == dst else x[0].detach()] for r, x in enumerate(X)]

    _check_gradients(_same((2, 2)), lambda x: [dnn.reduce(x[0], dst, op)], oracle)


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG])
def test_reduce_scatter(op, size):
    def distributed(x):
        output = mg.zeros((3,), dtype=mg.float64)
        result = dnn.reduce_scatter(output, x, op)
        assert_matches(output._array, result._array)  # filled in place, as in torch
        return [result]

    def oracle(X):
        outs = []
        for r in range(len(X)):
            total = sum(x[r] for x in X[1:]) + X[0][r]
            outs.append([total / len(X) if op is ReduceOp.AVG else total])
        return outs

    _check_gradients(lambda r: [(3,)] * size, distributed, oracle)


def test_all_to_all(size):
    def count(src, dst):
        return 1 + (src + 2 * dst) % 3

    def distributed(x):
        rank = dist.get_rank()
        outputs = [mg.zeros((count(j, rank),), dtype=mg.float64) for j in range(size)]
        return dnn.all_to_all(outputs, x)

    _check_gradients(lambda r: [(count(r, j),) for j in range(size)], distributed,
                     lambda X: [[X[j][r] for j in range(len(X))] for r in range(len(X))])


@pytest.mark.mpi(min_size=2)
def test_send_recv_pipeline(rank, size):
    # A chain 0 -> 1 -> ... -> size-1: each stage scales what it receives by (stage + 2) and
    # passes it on; the last stage's loss is the sum of squares.
    x = mg.tensor(rank_input(0, (3,)), requires_grad=True)
    if rank == 0:
        token = dnn.send(x * 2.0, dst=1)
        token.backward()
        scale = np.prod([s + 2.0 for s in range(size)])
        # d/dx of sum((scale * x)^2)
        assert_matches(x.grad._array, 2 * scale ** 2 * x._array)
        return
    h = dnn.recv(mg.zeros(3, dtype=mg.float64), src=rank - 1)
    assert h.requires_grad
    h = h * (rank + 2.0)
    if rank < size - 1:
        dnn.send(h, dst=rank + 1).backward()
    else:
        (h ** 2).sum().backward()


@pytest.mark.mpi(min_size=2)
def test_send_without_grad_needs_no_backward(rank):
    if rank == 0:
        token = dnn.send(mg.ones(2, dtype=mg.float64), dst=1)
        assert not token.requires_grad
    elif rank == 1:
        received = dnn.recv(mg.zeros(2, dtype=mg.float64), src=None)
        assert not received.requires_grad
        assert_matches(received._array, np.ones(2))


@pytest.mark.mpi(min_size=2)
def test_recv_with_grad_off_sends_zero_gradient(rank):
    if rank == 0:
        x = mg.ones(2, dtype=mg.float64, requires_grad=True)
        dnn.send(x, dst=1).backward()
        assert_matches(x.grad._array, np.zeros(2))
    elif rank == 1:
        with mg.no_grad():
            received = dnn.recv(mg.zeros(2, dtype=mg.float64), src=0)
        assert not received.requires_grad


def _contrastive_loss(queries, keys, first_label, total):
    """InfoNCE: row i of `queries` should match row first_label + i of `keys`. Returns the
    sum over these rows of the per-row loss, divided by `total` (the global batch size)."""
    def normalize(t):
        return t / ((t ** 2).sum(dim=1, keepdim=True)).sqrt()

    logits = normalize(queries) @ normalize(keys).T / 0.5
    labels = mg.tensor(np.arange(first_label, first_label + len(queries))[:, None])
    return -mg.take_along_dim(mg.log_softmax(logits, dim=1), labels, dim=1).sum() / total


def test_contrastive_loss_over_all_gather_matches_one_process(rank, size):
    batch, features, dim = 3, 4, 5
    weight = rank_input(0, (features, dim), seed=7)
    views = [(rank_input(r, (batch, features), seed=8), rank_input(r, (batch, features), seed=9))
             for r in range(size)]

    # Distributed: each rank embeds its own batch, gathers the keys of every rank, and takes
    # the mean loss over its own queries (the usual per-rank loss).
    w = mg.tensor(weight, requires_grad=True)
    queries = mg.tensor(views[rank][0]) @ w
    keys = mg.tensor(views[rank][1]) @ w
    queries.retain_grad()
    all_keys = mg.cat(dnn.all_gather(keys), dim=0)
    _contrastive_loss(queries, all_keys, rank * batch, batch).backward()
    dist.all_reduce(w.grad, op=ReduceOp.AVG)  # what DDP does with parameter gradients

    # One process, the whole batch, mean over all queries.
    w_single = mg.tensor(weight, requires_grad=True)
    all_queries = mg.cat([mg.tensor(q) for q, _ in views]) @ w_single
    all_queries.retain_grad()
    every_key = mg.cat([mg.tensor(k) for _, k in views]) @ w_single
    _contrastive_loss(all_queries, every_key, 0, size * batch).backward()

    assert_matches(w.grad._array, w_single.grad._array)
    # Per sample, the local loss is the global one times the world size.
    own = slice(rank * batch, (rank + 1) * batch)
    assert_matches(queries.grad._array / size, all_queries.grad._array[own])


def test_double_backward_through_all_gather(size):
    x = mg.tensor(rank_input(dist.get_rank(), (2,)), requires_grad=True)
    gathered = mg.cat(dnn.all_gather(x))
    loss = (gathered ** 3).sum()
    (grad,) = mg.autograd.grad(loss, [x], create_graph=True)
    grad.sum().backward()
    # loss = size * sum_r sum(x_r^3) in total; d/dx of sum(d loss/dx) = size * 6x
    assert_matches(x.grad._array, size * 6 * x._array)


def test_bad_arguments(rank, size):
    with pytest.raises(ValueError, match="differentiable for ReduceOp.SUM, ReduceOp.AVG; got"):
        dnn.reduce(mg.ones(1), 0, ReduceOp.MAX)
    with pytest.raises(TypeError, match="all_gather takes mpigrad Tensors, got ndarray"):
        dnn.all_gather(np.ones(1))
    group = dist.new_group([0])
    if rank != 0:
        with pytest.raises(ValueError, match=f"global rank {rank} is not a member"):
            dnn.all_gather(mg.ones(1), group=group)
    dist.destroy_process_group(group)


def test_the_functions_are_at_torchs_module_path_too():
    for name in ("all_gather", "all_reduce", "all_to_all", "broadcast", "reduce",
                 "reduce_scatter", "send", "recv"):
        assert getattr(functional, name) is getattr(dnn, name)
