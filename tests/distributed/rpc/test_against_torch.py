"""The same distributed computation in torch.distributed.rpc (TensorPipe) and in mpigrad:
a weight on worker1, a nested call back to worker0, a weight fetched twice; the loss and
every gradient of torch's distributed autograd equal mpigrad's (float64, 1e-10)."""
import os
import socket

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed.autograd as dist_autograd
import mpigrad.distributed.rpc as rpc

from . import _remote
from .conftest import bounded

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.mpi(min_size=2)
_torch_weights = {}


def _arrays():
    rng = np.random.default_rng(5)
    return {"A": rng.standard_normal((4, 3)), "B": rng.standard_normal((3, 3))}


def torch_weight(name):
    return _torch_weights[name]


def torch_inner(t):
    return torch.sigmoid(t @ _torch_weights["B"])


def torch_outer(h):
    import torch.distributed.rpc as trpc  # only where torch runs
    t = torch.tanh(h @ _torch_weights["A"])
    return trpc.rpc_sync("worker0", torch_inner, args=(t,)) * t.sum()


def torch_grad(name, context_id):
    import torch.distributed.autograd as t_autograd  # only where torch runs
    return t_autograd.get_gradients(context_id)[_torch_weights[name]]


def mg_weight(name):
    return _remote.state["mg_weights"][name]


def mg_inner(t):
    return mg.sigmoid(t @ _remote.state["mg_weights"]["B"])


def mg_outer(h):
    t = mg.tanh(h @ _remote.state["mg_weights"]["A"])
    return rpc.rpc_sync("worker0", mg_inner, args=(t,)) * t.sum()


def mg_grad(name, context_id):
    return dist_autograd.get_gradients(context_id)[_remote.state["mg_weights"][name]]


def _free_port():
    """A port nothing listens on now (a random one in a fixed range sometimes met a socket
    left by an earlier test, and torch's RPC then failed to start on two ranks)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _owner(name):
    return 1 if name == "A" else 0


def test_distributed_autograd_matches_torch_rpc(workers):
    import torch.distributed.autograd as t_autograd
    import torch.distributed.rpc as trpc
    rank, size = workers
    comm = MPI.COMM_WORLD
    port = comm.bcast(_free_port() if rank == 0 else None)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    arrays = _arrays()
    _torch_weights.update({k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()})
    _remote.state["mg_weights"] = {k: mg.tensor(v, requires_grad=True) for k, v in arrays.items()}
    trpc.init_rpc(f"worker{rank}", rank=rank, world_size=size)
    try:
        if rank == 0:
            x = np.random.default_rng(6).standard_normal((2, 4))
            with bounded(120):
                xt = torch.tensor(x, requires_grad=True)
                with t_autograd.context() as tid:
                    a1 = trpc.rpc_sync("worker1", torch_weight, args=("A",))
                    out = trpc.rpc_sync("worker1", torch_outer, args=(xt,))
                    a2 = trpc.rpc_sync("worker1", torch_weight, args=("A",))
                    t_loss = (out ** 2).sum() + (a1 * a2).sum()
                    t_autograd.backward(tid, [t_loss])
                    t_grads = {n: trpc.rpc_sync(f"worker{_owner(n)}", torch_grad, args=(n, tid))
                               for n in arrays}
                    t_x = t_autograd.get_gradients(tid)[xt]
                xm = mg.tensor(x, requires_grad=True)
                with dist_autograd.context() as mid:
                    a1 = rpc.rpc_sync("worker1", mg_weight, args=("A",))
                    out = rpc.rpc_sync("worker1", mg_outer, args=(xm,))
                    a2 = rpc.rpc_sync("worker1", mg_weight, args=("A",))
                    m_loss = (out ** 2).sum() + (a1 * a2).sum()
                    dist_autograd.backward(mid, [m_loss])
                    m_grads = {n: rpc.rpc_sync(_owner(n), mg_grad, args=(n, mid)) for n in arrays}
                    m_x = dist_autograd.get_gradients(mid)[xm]
            np.testing.assert_allclose(m_loss.item(), t_loss.item(), rtol=1e-10)
            np.testing.assert_allclose(m_x._array, t_x.numpy(), rtol=1e-10, atol=1e-12)
            for name in arrays:
                np.testing.assert_allclose(m_grads[name]._array, t_grads[name].numpy(),
                                           rtol=1e-10, atol=1e-12)
    finally:
        trpc.shutdown()
