"""Starting and stopping RPC, with torch.distributed.rpc's names and arguments: init_rpc,
shutdown, get_worker_info, the backend options; and the one place where the agent is wired to
the message handlers of calls, RRefs and distributed autograd (the modules below it never
import it)."""
import atexit
import gc
import numbers
import warnings

from mpi4py import MPI

from ...autograd import grad_mode
from ..autograd import contexts
from ..autograd import engine as dist_engine
from ..fault import abort
from ..launch import rendezvous
from . import agent as agents
from . import functions, wire
from . import rref as rrefs
from .agent import Agent, Handler, current_agent
from .constants import DEFAULT_NUM_WORKER_THREADS, DEFAULT_RPC_TIMEOUT_SEC


class MPIRpcBackendOptions:
    """Options of the MPI agent, with TensorPipeRpcBackendOptions' arguments. `rpc_timeout`
    (seconds, 0 for none) is the default timeout of every call; `num_worker_threads` the size
    of the pool that runs requests. `init_method` (with init_rpc's rank and world_size) is where
    the workers meet when no MPI launcher started them (see distributed.launch.rendezvous); under a
    launcher the workers are the ranks of the MPI world it formed. Every tensor is on the CPU, so
    `device_maps` and `devices` may only name the CPU; anything else is refused, not dropped.
    `_transports` and `_channels` (TensorPipe's internals) are accepted and mean nothing here."""

    def __init__(self, *, num_worker_threads=DEFAULT_NUM_WORKER_THREADS,
                 rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC, init_method="env://", device_maps=None,
                 devices=None, _transports=None, _channels=None):
        if not isinstance(num_worker_threads, numbers.Integral) or num_worker_threads < 1:
            raise ValueError(f"num_worker_threads must be a positive int, got "
                             f"{num_worker_threads!r}")
        if not isinstance(rpc_timeout, numbers.Real) or rpc_timeout < 0:
            raise ValueError(f"rpc_timeout must be a number of seconds >= 0 (0: no timeout), "
                             f"got {rpc_timeout!r}")
        self.num_worker_threads = int(num_worker_threads)
        self.rpc_timeout = float(rpc_timeout)
        self.init_method = init_method
        self.device_maps = {}
        self.devices = []
        for to, device_map in (device_maps or {}).items():
            self.set_device_map(to, device_map)
        if devices:
            self.set_devices(devices)

    def set_device_map(self, to, device_map):
        """torch's call: here only a CPU-to-CPU map, the only one there is."""
        _require_cpu(f"device_maps[{to!r}]", [*device_map.keys(), *device_map.values()])
        self.device_maps[to] = dict(device_map)

    def set_devices(self, devices):
        _require_cpu("devices", devices)
        self.devices = list(devices)


def _require_cpu(what, devices):
    not_cpu = [d for d in devices if str(d).split(":")[0] != "cpu"]
    if not_cpu:
        raise ValueError(f"RPC backend options: {what} names {not_cpu}, but mpigrad has no GPU "
                         "and keeps every tensor on the CPU; leave device maps out (or map "
                         "'cpu' to 'cpu')")


TensorPipeRpcBackendOptions = MPIRpcBackendOptions


class BackendType:
    """Only MPI exists here; TENSORPIPE is accepted so torch scripts run unchanged."""
    MPI = "MPI"
    TENSORPIPE = "TENSORPIPE"


def init_rpc(name, backend=None, rank=None, world_size=None, rpc_backend_options=None):
    """Start this worker's RPC agent; collective over MPI.COMM_WORLD (every rank calls it).
    Rank and world size come from MPI; if given they must agree with it. In processes that no
    MPI launcher started, MPI starts here, after the workers meet as init_process_group's do
    (the options' init_method, env:// by default, with `rank` and `world_size`)."""
    if agents.current is not None:
        raise RuntimeError("init_rpc was already called on this worker; call shutdown() first")
    options = rpc_backend_options or MPIRpcBackendOptions()
    if not isinstance(options, MPIRpcBackendOptions):
        raise TypeError(f"rpc_backend_options must be MPIRpcBackendOptions (or "
                        f"TensorPipeRpcBackendOptions), got {type(options).__name__}")
    # Where no launcher started MPI (see rendezvous): meet the workers init_method names first.
    rendezvous.start_mpi(options.init_method, -1 if rank is None else rank,
                         -1 if world_size is None else world_size)
    level = MPI.Query_thread()
    if level < MPI.THREAD_MULTIPLE:
        names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED:
                 "MPI_THREAD_FUNNELED", MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED"}
        raise RuntimeError(
            f"mpigrad RPC needs MPI_THREAD_MULTIPLE (its listener and worker threads call MPI "
            f"at the same time), but MPI was initialized with {names.get(level, level)}. "
            f"mpi4py asks for MPI_THREAD_MULTIPLE unless told otherwise: remove any "
            f"`mpi4py.rc.thread_level = ...` (its default is 'multiple') set before the first "
            f"`from mpi4py import MPI`, or use an MPI library built with thread support")
    # As init_process_group does: a rank that dies of an uncaught exception ends the job
    # (MPIGRAD_ABORT_ON_EXCEPTION=0 turns it off) rather than leaving its peers waiting.
    abort.set_abort_on_exception(abort.setting(None))
    world = MPI.COMM_WORLD
    problem = None
    if rank not in (None, -1) and rank != world.Get_rank():
        problem = f"rank={rank} but this process is MPI rank {world.Get_rank()}"
    elif world_size is not None and world_size != world.Get_size():
        problem = f"world_size={world_size} but MPI started {world.Get_size()} processes"
    handlers = {"call": Handler(_run_call), "bye": Handler(_peer_left, inline=True),
                "done": Handler(_peer_done, inline=True)}
    handlers.update(rrefs.handlers(Handler))
    handlers.update(dist_engine.handlers(Handler))
    codec = _Codec()
    agents.current = codec.agent = Agent(name, options, handlers, codec, problem)
    agents.current.start()
    atexit.register(_stop_at_exit)


def get_worker_info(worker_name=None):
    """This worker's WorkerInfo, or that of the worker called `worker_name`."""
    agent = current_agent("get_worker_info")
    return agent.info if worker_name is None else agent.worker(worker_name)


def shutdown(graceful=True, timeout=0):
    """Stop this worker's agent. Graceful (collective): wait until every worker has finished
    all its outstanding work, then stop everywhere. Not graceful: stop now and tell the
    other workers, whose calls to this one then fail at once."""
    agent = current_agent("shutdown")
    try:
        if graceful:
            gc.collect()  # user RRefs that are garbage now send their deletes first
            departed = agent.agree_all_done()
            if departed:
                warnings.warn(f"rpc.shutdown: {', '.join(departed)} had left; shut down "
                              "among the workers that are left", RuntimeWarning, stacklevel=2)
    finally:
        agent.stop(graceful, "it called shutdown(graceful=False)")
        agents.current = None
        rrefs._reset()
        contexts.reset()


def _stop_at_exit():
    atexit.unregister(_stop_at_exit)
    if agents.current is not None:
        agents.current.stop(False, "its process exited without calling rpc.shutdown()")
        agents.current = None


def _run_call(sender, payload):
    func, args, kwargs = payload
    return functions.call(func, args, kwargs)


def _peer_left(sender, why):
    current_agent("RPC").peer_gone(sender, why)


def _peer_done(sender, _payload):
    current_agent("RPC").peer_done(sender)


class _Codec:
    """The hooks by which RRefs and distributed autograd take part in encoding and decoding
    messages (see wire.py); `agent` is set once the agent exists."""
    agent = None

    def fork(self, rref, dest):
        return rrefs.fork(rref, dest, self.agent)

    def records_grad(self):
        return contexts.current_id() is not None and grad_mode.is_grad_enabled()

    def record_send(self, dest, grad_tensors):
        context_id = contexts.current_id()
        if context_id is None:
            return None
        send_id = dist_engine.record_send(context_id, dest, grad_tensors)
        return context_id, send_id, [wire.layout(t._array) for t in grad_tensors]

    def decode(self, source, autograd, body, arrays):
        node = None
        if autograd is not None:
            context_id, send_id, layouts = autograd
            node = dist_engine.record_recv(context_id, source, send_id, layouts)
        return wire.loads(body, arrays, node, lambda d: rrefs.receive(d, self.agent))

    @staticmethod
    def context_of(autograd):
        return None if autograd is None else autograd[0]

    running_in = staticmethod(contexts.running_in)
