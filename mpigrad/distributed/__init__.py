"""mpigrad.distributed: torch.distributed's communication API, over MPI (mpi4py).

    import mpigrad.distributed as dist
    dist.init_process_group()                # MPI.COMM_WORLD ("gloo", "nccl"... accepted)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)  # t: an mpigrad.Tensor or a numpy array

Launch with `mpiexec -n 4 python train.py`, `srun --mpi=pmi2 python train.py`,
`torchrun --nproc_per_node=4 train.py` (see `launch`), `mpigrad.multiprocessing.spawn` or
separate processes calling `init_process_group(init_method=..., rank=r, world_size=n)`, or
plain `python train.py` (one process). Tensors travel as MPI buffers, in place in their storage.

The rooms, lowest first (docs/architecture.md has the rules; tests/test_layering.py
enforces them):

- vocabulary: `errors`, `settings` (environment values, checked), `buffers` (tensors and
  arrays as MPI buffers, dtypes), `reduce_ops` (ReduceOp and its MPI translation).
- `launch/`: the launcher variables; the rendezvous, which joins processes torchrun started
  into one MPI world when this package is imported, and processes started otherwise
  (mpigrad.multiprocessing, separate `python`s) at init_process_group, where MPI then starts;
  and its PMI server.
- `fault/`: the watchdog around every blocking call, abort on an uncaught exception, the
  cross-rank collective checks (MPIGRAD_CHECK_COLLECTIVES=0 turns them off), /dev/shm clean-up.
- the communication core: `process_group` (init_process_group with torch's signature,
  get_rank, get_world_size, get_local_rank, new_group, destroy_process_group; `group.WORLD.comm`
  is the default group's mpi4py communicator), `collectives` (all_reduce, reduce, broadcast,
  all_gather(_into_tensor), gather, scatter, reduce_scatter(_tensor), all_to_all(_single),
  barrier; `async_op=True` returns a `Work`), `p2p` (send, recv, isend, irecv), `objects`
  (all_gather_object, broadcast_object_list), `ring` (a ring allreduce on point-to-point
  messages), `work`, and `nn` (import it explicitly: differentiable collectives).
- `algorithms/`: DDP's comm hooks (with the hierarchical allreduce and the driver of hooks in
  several rounds) and Join, at PyTorch's paths.
- `ddp/`: DistributedDataParallel (also mpigrad.nn.parallel.DistributedDataParallel), its
  Reducer, Channel, GradBucket and timeline.
- `rpc/` and `autograd/`: RPC, RRef and distributed autograd; `optim/`: DistributedOptimizer
  and ZeroRedundancyOptimizer.
- `device_mesh` (init_device_mesh, DeviceMesh: a process group per mesh dimension), `fsdp/`
  (fully_shard, FullyShardedDataParallel), `checkpoint/` (sharded checkpoints, torch's DCP,
  and `checkpoint.state_dict`: full and sharded state dicts of sharded models) and
  `pipelining/` (pipeline parallelism): import the last three explicitly, as in torch.

After init_process_group an uncaught exception on any rank aborts the whole job (with the
rank's traceback) instead of leaving the others waiting (init_process_group(
abort_on_exception=False), MPIGRAD_ABORT_ON_EXCEPTION=0 or `set_abort_on_exception(False)`
turn that off; importing the package installs nothing), and a rank blocked in one call for
longer than the group's timeout (30 minutes by default) aborts the job, saying where.
"""
from .launch import rendezvous

# Before anything imports mpi4py's MPI (which would initialise MPI): processes that torchrun
# started become one MPI world here; in processes no launcher started, MPI starts only at
# init_process_group, which then knows where the others are.
rendezvous.join_from_environment()
rendezvous.defer_mpi_start()

from . import algorithms  # noqa: E402
from .fault.abort import set_abort_on_exception  # noqa: E402
from .collectives import (all_gather, all_gather_into_tensor, all_reduce,  # noqa: E402
                          all_to_all, all_to_all_single, barrier, broadcast, gather, reduce, reduce_scatter,
                          reduce_scatter_tensor, scatter)
from .device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from .errors import CollectiveMismatchError, DistError, MessageMismatchError  # noqa: E402
from .objects import all_gather_object, broadcast_object_list  # noqa: E402
from .p2p import irecv, isend, recv, send  # noqa: E402
from .process_group import (Backend, GroupMember, ProcessGroup,  # noqa: E402
                            destroy_process_group, get_backend, get_default_backend_for_device,
                            get_global_rank, get_group_rank, get_local_rank,
                            get_local_world_size, get_node_local_rank, get_process_group_ranks,
                            get_rank, get_world_size, group, init_process_group, is_available,
                            is_initialized, new_group)
from .reduce_ops import ReduceOp, _make_nccl_premul_sum, reduce_op  # noqa: E402
from .work import Work  # noqa: E402
