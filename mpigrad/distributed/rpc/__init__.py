"""mpigrad.distributed.rpc: torch.distributed.rpc over MPI.

    import mpigrad.distributed.rpc as rpc
    rpc.init_rpc(f"worker{rank}")              # under mpiexec; rank and size from MPI
    y = rpc.rpc_sync("worker1", mg.add, args=(x, 1))
    fut = rpc.rpc_async(1, torch_fn, args=(x,))   # a mpigrad.futures.Future
    rref = rpc.remote("worker1", Net)              # the Net lives on worker1
    rref.rpc_sync().forward(x)
    rpc.shutdown()                                 # waits for every worker's outstanding work

Lowest first (each imports only those above it; distributed autograd sits between the
transport and the calls that record into it):

- `constants`, `functions` (`async_execution`, for functions that reply with a Future's
  result), `wire` (the message format: a marshalled header, pickle only for what it cannot
  carry, tensors as raw MPI buffers inside or beside it), `agent` (the per-process agent:
  a listener thread that runs what it receives, a cover thread that receives meanwhile, a
  request pool, timeouts, shutdown; and the current one, `current_agent`).
- `mpigrad.distributed.autograd`: contexts, send/recv functions, the distributed engine.
- `calls`: rpc_sync, rpc_async. `rref`: RRef, its reference-counting protocol, and remote.
- `api`: init_rpc, shutdown, get_worker_info, backend options; the only module that wires
  the agent to the handlers of calls, RRefs and distributed autograd.
"""
from . import functions
from .agent import RpcTimeoutError, WorkerInfo, WorkerUnavailableError
from .api import (BackendType, MPIRpcBackendOptions, TensorPipeRpcBackendOptions,
                  get_worker_info, init_rpc, shutdown)
from .calls import rpc_async, rpc_sync
from .constants import DEFAULT_RPC_TIMEOUT_SEC, UNSET_RPC_TIMEOUT
from .rref import RRef, remote
from ...futures import Future

__all__ = ["functions", "init_rpc", "rpc_sync", "rpc_async", "remote", "get_worker_info", "shutdown", "RRef",
           "WorkerInfo", "Future", "BackendType", "MPIRpcBackendOptions",
           "TensorPipeRpcBackendOptions", "RpcTimeoutError", "WorkerUnavailableError",
           "DEFAULT_RPC_TIMEOUT_SEC", "UNSET_RPC_TIMEOUT"]
