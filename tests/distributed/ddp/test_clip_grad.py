"""Gradient clipping after DDP's backward: every rank sees the averaged gradients, so every
rank computes the same total norm and clips identically, as one process would on the whole
batch."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.nn.utils import clip_grad_norm_
from mpigrad.optim import SGD

from ._models import MLP, mse, params_of
from .test_ddp import assert_identical_across_ranks, global_batches, local

MAX_NORM = 0.05  # below every step's norm here, so each step really clips


def _clipped_steps(model, batches, slice_of):
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    norms = []
    for batch in batches:
        x, y = slice_of(batch)
        opt.zero_grad()
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        norms.append(clip_grad_norm_(model.parameters(), MAX_NORM).item())
        opt.step()
    return norms


@pytest.mark.mpi(min_size=2)
def test_clipping_after_ddp_backward_matches_one_process(rank, size):
    batches = global_batches(size)
    model = DDP(MLP(seed=rank))
    norms = _clipped_steps(model, batches, lambda batch: local(batch, rank))
    oracle = MLP(seed=0)
    expected = _clipped_steps(oracle, batches, lambda batch: batch)
    assert min(expected) > MAX_NORM
    np.testing.assert_allclose(norms, expected, rtol=1e-12)
    for got, want in zip(params_of(model), params_of(oracle)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert_identical_across_ranks(params_of(model) + [np.array(norms)])
