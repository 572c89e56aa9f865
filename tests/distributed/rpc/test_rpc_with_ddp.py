"""RPC traffic while DistributedDataParallel trains on the same ranks: the agent's own
communicators keep the two apart, so DDP still equals its one-process oracle and every RPC
returns the right value."""
import threading

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed.rpc as rpc
from mpigrad.nn.parallel import DistributedDataParallel as DDP

from ..ddp._models import MLP
from ..ddp.test_ddp import assert_matches_oracle, global_batches, train
from . import _remote
from .conftest import bounded

pytestmark = pytest.mark.mpi(min_size=2)


def test_rpc_while_ddp_trains(workers):
    rank, size = workers
    stop = threading.Event()
    checked, errors = [], []

    def chatter():
        rng = np.random.default_rng(rank)
        try:
            while not stop.is_set():
                t = mg.from_numpy(rng.standard_normal(1000))
                peers = [(rank + k) % size for k in range(1, size)]
                futures = [rpc.rpc_async(p, _remote.scaled, args=(t, p + 1.0)) for p in peers]
                for peer, fut in zip(peers, futures):
                    np.testing.assert_array_equal(fut.wait()._array, t._array * (peer + 1.0))
                    checked.append(peer)
        except Exception as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=chatter)
    thread.start()
    try:
        with bounded(180):
            batches = global_batches(size, steps=6)
            model = DDP(MLP(seed=rank), bucket_cap_mb=300 / 2**20)
            train(model, batches, rank)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert checked, "no RPC completed while DDP trained"
    assert_matches_oracle(model, batches)
