"""mpigrad.distributed.rpc: torch.distributed.rpc over MPI.

    import mpigrad.distributed.rpc as rpc
    rpc.init_rpc(f"worker{rank}")              # under mpiexec; rank and size from MPI
    y = rpc.rpc_sync("worker1", mg.add, args=(x, 1))
    fut = rpc.rpc_async(1, torch_fn, args=(x,))   # a mpigrad.futures.Future
    rref = rpc.remote("worker1", Net)              # the Net lives on worker1
    rref.rpc_sync().forward(x)
    rpc.shutdown()                                 # waits for every worker's outstanding work

- `agent`: the per-process agent (listener thread, request pool, timeouts, shutdown).
- `wire`: the message format: a pickled header, tensors as raw MPI buffers beside it.
- `rref`: RRef and its reference-counting protocol.
- `api`: init_rpc, rpc_sync, rpc_async, remote, get_worker_info, shutdown, backend options.
- `functions`: `async_execution`, for functions that reply with a Future's result.
"""
from . import functions
from .agent import RpcTimeoutError, WorkerInfo, WorkerUnavailableError
from .api import (BackendType, MPIRpcBackendOptions, TensorPipeRpcBackendOptions,
                  get_worker_info, init_rpc, remote, rpc_async, rpc_sync, shutdown)
from .constants import DEFAULT_RPC_TIMEOUT_SEC, UNSET_RPC_TIMEOUT
from .rref import RRef
from ...futures import Future

__all__ = ["functions", "init_rpc", "rpc_sync", "rpc_async", "remote", "get_worker_info", "shutdown", "RRef",
           "WorkerInfo", "Future", "BackendType", "MPIRpcBackendOptions",
           "TensorPipeRpcBackendOptions", "RpcTimeoutError", "WorkerUnavailableError",
           "DEFAULT_RPC_TIMEOUT_SEC", "UNSET_RPC_TIMEOUT"]
