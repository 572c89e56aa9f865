"""The scenarios of PyTorch's tutorial "Writing Distributed Applications with PyTorch",
written for mpigrad: point-to-point messages, a group all-reduce, a ring all-reduce built by
hand from isend/recv, and data-parallel SGD by averaging gradients after backward."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist

from .._helpers import assert_matches, rank_input

pytestmark = pytest.mark.mpi(min_size=2)


def test_blocking_point_to_point(rank, size):
    t = mg.zeros(1, dtype=mg.float64)
    if rank == 0:
        t.data += 1
        for peer in range(1, size):
            dist.send(t, dst=peer)
    else:
        assert dist.recv(t, src=0) == 0
    assert t.item() == 1.0


def test_nonblocking_point_to_point(rank, size):
    t = mg.zeros(1, dtype=mg.float64)
    if rank == 0:
        t.data += 1
        works = [dist.isend(t, dst=peer) for peer in range(1, size)]
    else:
        works = [dist.irecv(t, src=0)]
    for work in works:
        work.wait()
    assert t.item() == 1.0


def test_all_reduce_on_a_group(rank):
    group = dist.new_group([0, 1])
    t = mg.ones(1, dtype=mg.float64)
    if rank in (0, 1):
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        assert t.item() == 2.0
    dist.destroy_process_group(group)


def _hand_made_ring_all_reduce(t):
    """Sum over ranks by passing values around the ring: each step forwards what arrived last
    to the right neighbour and adds what comes from the left."""
    rank, size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    outgoing, total = t._array.copy(), t._array.copy()
    incoming = np.empty_like(outgoing)
    for _ in range(size - 1):
        sending = dist.isend(outgoing, dst=right)
        dist.recv(incoming, src=left)
        sending.wait()
        total += incoming
        outgoing, incoming = incoming, outgoing
    t._array[...] = total
    t.mark_written()


def test_hand_made_ring_and_the_built_in_one_agree(rank, size):
    expected = np.stack([rank_input(r, (5,)) for r in range(size)]).sum(0)
    by_hand = mg.tensor(rank_input(rank, (5,)))
    _hand_made_ring_all_reduce(by_hand)
    built_in = mg.tensor(rank_input(rank, (5,)))
    dist.all_reduce(built_in, algorithm="ring")
    assert_matches(by_hand.data, expected)
    assert_matches(built_in.data, expected)


def _batch(r, n=4):
    x = rank_input(r, (n, 3), seed=1)
    return x, x @ np.array([[1.0], [-2.0], [0.5]]) + 0.1 * rank_input(r, (n, 1), seed=2)


def _mse_grad(w, x, y):
    w = mg.tensor(w, requires_grad=True)
    loss = ((mg.tensor(x) @ w - mg.tensor(y)) ** 2).mean()
    loss.backward()
    return w.grad


def test_gradient_averaging_after_backward(rank, size):
    # Each rank's mean loss over its own equal-sized batch; averaging the gradients over ranks
    # gives the gradient of the mean loss over the whole batch.
    w = rank_input(0, (3, 1), seed=3)
    grad = _mse_grad(w, *_batch(rank))
    dist.all_reduce(grad, op=dist.ReduceOp.SUM)
    grad.data /= size
    everything = [np.concatenate(parts) for parts in zip(*(_batch(r) for r in range(size)))]
    assert_matches(grad.data, _mse_grad(w, *everything).data)


def test_data_parallel_sgd_stays_in_sync_with_one_process(rank, size):
    w_parallel = w_single = rank_input(0, (3, 1), seed=3)
    everything = [np.concatenate(parts) for parts in zip(*(_batch(r) for r in range(size)))]
    for _ in range(3):
        grad = _mse_grad(w_parallel, *_batch(rank))
        dist.all_reduce(grad, op=dist.ReduceOp.AVG)
        w_parallel = w_parallel - 0.1 * grad._array
        w_single = w_single - 0.1 * _mse_grad(w_single, *everything)._array
    assert_matches(w_parallel, w_single)
    replicas = [None] * size
    dist.all_gather_object(replicas, w_parallel.tobytes())
    assert len(set(replicas)) == 1
