"""A checkpointed segment inside DistributedDataParallel, with and without unused parameters:
N ranks with batch B/N give what one process gives with batch B."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn, ops
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD
from mpigrad.utils.checkpoint import checkpoint

PER_RANK = 4


class Net(nn.Module):
    def __init__(self, with_unused):
        super().__init__()
        rng = np.random.default_rng(0)
        for k, (i, o) in enumerate([(5, 8), (8, 8), (8, 3)]):
            setattr(self, f"w{k}", nn.Parameter(rng.standard_normal((o, i)) / np.sqrt(i)))
            setattr(self, f"b{k}", nn.Parameter(0.1 * rng.standard_normal(o)))
        if with_unused:
            self.unused = nn.Parameter(np.ones(3))

    def segment(self, x):
        # The input is data, not requiring grad: w0 and w1 get gradients only through the graph.
        h = ops.linear(x, self.w0, self.b0).tanh()
        return ops.linear(h, self.w1, self.b1).tanh()

    def forward(self, x):
        h = checkpoint(self.segment, x, use_reentrant=False)
        return ops.linear(h, self.w2, self.b2)


def _batch(n, step):
    rng = np.random.default_rng(100 + step)
    return mg.tensor(rng.standard_normal((n, 5))), mg.tensor(rng.standard_normal((n, 3)))


def _train(model, batches, rank=0, per=None):
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches:
        if per is not None:
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("find_unused_parameters", [False, True])
def test_ddp_with_a_checkpointed_segment_matches_one_process(rank, size, find_unused_parameters):
    batches = [_batch(PER_RANK * size, s) for s in range(3)]
    model = DDP(Net(find_unused_parameters), bucket_cap_mb=0,
                find_unused_parameters=find_unused_parameters)
    got = _train(model, batches, rank, PER_RANK)
    want = _train(Net(find_unused_parameters), batches)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-10)
    if find_unused_parameters:
        assert model.module.unused.grad is None
