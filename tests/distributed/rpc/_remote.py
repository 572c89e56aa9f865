"""Functions the tests call remotely: defined at module level so they travel by name."""
import os
import threading
import time
import weakref

import numpy as np

import mpigrad as mg
import mpigrad.distributed.rpc as rpc

state = {}


def identity(*values):
    return values if len(values) != 1 else values[0]


def add(a, b=0, *, scale=1):
    return (a + b) * scale


def whoami():
    return rpc.get_worker_info().name


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def times_out_calling(to, seconds, event):
    """A call from inside a request that must time out: to `to`, whose function waits for
    `event` (set it after). Run on the callee's listener, only the thread that receives for
    it meanwhile can expire the call."""
    try:
        rpc.rpc_sync(to, wait_for_event, args=(event, 60), timeout=seconds)
    except rpc.RpcTimeoutError:
        return "timed out"
    return "answered"


def raise_value_error(message):
    raise ValueError(message)


def raise_custom():
    raise CustomError("a", 3)


class CustomError(Exception):
    """Built from two arguments, so it cannot be rebuilt from one message string."""

    def __init__(self, name, count):
        super().__init__(f"{name} failed {count} times")


def call_back(to, func, args):
    """A nested call: this worker calls `to` while serving a request."""
    return rpc.rpc_sync(to, func, args=args)


def set_event_later(name):
    event = state.setdefault(name, threading.Event())
    event.set()
    return True


def wait_for_event(name, timeout):
    event = state.setdefault(name, threading.Event())
    return event.wait(timeout)


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, amount):
        self.value += amount
        return self.value

    def get(self):
        return self.value


def make_tracked(key):
    """A value whose death the owner can observe through a weak reference."""
    value = Counter(0)
    state[key] = weakref.ref(value)
    return value


def is_alive(key):
    return state[key]() is not None


def owned_count():
    from mpigrad.distributed.rpc import rref
    return rref.owned_count()


def context_count():
    from mpigrad.distributed.autograd import contexts
    return contexts.count()


def to_here_of(rref):
    return rref.to_here()


def rref_owner_and_value(rref):
    return rref.owner_name(), rref.to_here().value, rref.is_owner()


def wrap_in_rref(value):
    return rpc.RRef(value)


def array_sum(a):
    return np.asarray(a).sum()


def tensor_info(t):
    return type(t).__name__, t.dtype.str, tuple(t.shape), t.requires_grad


def scaled(t, factor):
    return t * factor


def random_tensor(seed, shape):
    return mg.from_numpy(np.random.default_rng(seed).standard_normal(shape))


# ---- a model split across workers (distributed autograd and DistributedOptimizer tests) ----

def make_params(size, seed=7):
    """Every worker builds every parameter from one seed; each uses only its own:
    W0 on worker0, W1 on worker1, W2 on worker2 (worker0 when there are only two, so the
    nested call goes back to the driver)."""
    rng = np.random.default_rng(seed)
    shapes = {"W0": (4, 4), "W1": (4, 3), "W2": (3, 2)}
    state["arrays"] = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    state["params"] = {name: mg.tensor(a.copy(), requires_grad=True)
                       for name, a in state["arrays"].items()}
    state["owners"] = {"W0": 0, "W1": 1, "W2": 2 % size}


def param(name):
    return state["params"][name]


def param_rref(name):
    return rpc.RRef(param(name))


def stage1(h):
    """On worker1: a layer, then a nested call to W2's owner; also returns a tensor that
    the loss never uses."""
    t = mg.tanh(h @ param("W1"))
    out = rpc.rpc_sync(state["owners"]["W2"], stage2, args=(t,))
    return out, t * 3.0


def stage2(t):
    return mg.sigmoid(t @ param("W2")) + t.sum()


def split_loss(x, W0, fetch_w1, run_stage1):
    """The model, written once: the distributed run passes RPC-backed `fetch_w1` and
    `run_stage1`, the oracle local ones."""
    h = mg.relu(x @ W0)
    w1a = fetch_w1()
    out, _unused = run_stage1(h)
    w1b = fetch_w1()  # the remote weight is used twice
    return (out ** 2).sum() + (w1a * w1b).sum() * 0.1 + h.sum() * w1a.mean()


def distributed_split_loss(x):
    return split_loss(x, param("W0"), lambda: rpc.rpc_sync(1, param, args=("W1",)),
                      lambda h: rpc.rpc_sync(1, stage1, args=(h,)))


def grad_of(name, context_id):
    from mpigrad.distributed import autograd as dist_autograd  # only these tests use it
    return dist_autograd.get_gradients(context_id).get(param(name))


def grad_attribute(name):
    return param(name).grad


class Explode(mg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        raise ArithmeticError("backward exploded on purpose")


def explode_stage(h):
    return Explode.apply(h @ param("W1"))


class Held(mg.autograd.Function):
    """Identity whose backward scales by the factor set when it starts (hold_backward,
    release_backward), and waits first while `hold_backward`'s gate is shut: a held pass
    sends gradients that differ from those of a pass after the release."""

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        factor, gate = state["factor"], state.get("backward gate")
        if gate is not None:
            gate.wait(60)
        return grad * factor


def held_stage(x):
    return Held.apply(x)


def hold_backward(factor):
    """Held's backwards from now on wait for `release_backward`: a pass that outlasts its
    timeout for as long as the test needs, where a sleep long enough under load was waited
    out in full (by the test, then by shutdown)."""
    state["backward gate"], state["factor"] = threading.Event(), factor


def release_backward(factor):
    state["factor"] = factor
    state.pop("backward gate").set()


class FailingSGD(mg.optim.SGD):
    def step(self, closure=None):
        raise RuntimeError("this optimizer refuses to step")


def squared_sum(t):
    return (t * t).sum()


class BatchingServer:
    """PyTorch's batch-updating parameter server: trainers' gradients are summed, and only
    when all have arrived is the update applied and every waiting trainer answered."""

    def __init__(self, trainers, lr=0.1):
        self.weights = mg.zeros(3, dtype=mg.float64)
        self.trainers, self.lr = trainers, lr
        self.lock = threading.Lock()
        self.pending = mg.zeros(3, dtype=mg.float64)
        self.arrived = 0
        self.future = rpc.Future()

    def get_weights(self):
        return self.weights

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch(server_rref, grad):
        self = server_rref.local_value()
        with self.lock:
            self.pending += grad
            self.arrived += 1
            future = self.future
            if self.arrived == self.trainers:
                self.weights = self.weights - self.lr * self.pending / self.trainers
                self.pending, self.arrived = mg.zeros(3, dtype=mg.float64), 0
                self.future = rpc.Future()
                future.set_result(self.weights)
        return future


def trainer_gradient(weights, rank, step):
    """A deterministic gradient of a quadratic whose minimum depends on the trainer."""
    target = mg.tensor([rank, -rank, 0.5 * step], dtype=mg.float64)
    return 2 * (weights - target)


@rpc.functions.async_execution
def async_add_later(a, b):
    """Answers with a Future that another thread completes a little later."""
    future = rpc.Future()
    threading.Timer(0.05, future.set_result, args=(a + b,)).start()
    return future


@rpc.functions.async_execution
def async_chain(to, a, b):
    """Nested and chained: calls another async function and adds one to its answer."""
    return rpc.rpc_async(to, async_add_later, args=(a, b)).then(lambda done: done.wait() + 1)


@rpc.functions.async_execution
def async_returns_a_number():
    return 3


def shared_server(trainers):
    """The one BatchingServer of this worker, as an RRef (made by the first caller)."""
    with _server_lock:
        if "server" not in state:
            state["server"] = rpc.RRef(BatchingServer(trainers))
        return state["server"]


_server_lock = threading.Lock()


def gradients_waiting(context_id):
    """How many gradient messages wait, unconsumed, in this worker's context."""
    from mpigrad.distributed.autograd import contexts
    context = contexts.retrieve(context_id)
    with context.cond:
        return len(context.mailbox)


@rpc.functions.async_execution
def async_answer_when_told():
    """Answers with state["answer"], a Future the callee's main thread completes."""
    future = state["answer"] = rpc.Future()
    set_event_later("asked")
    return future


def cover_cpu_while_sleeping(seconds):
    """Sleep `seconds` in a request the listener runs; returns the CPU seconds the cover
    thread (which receives meanwhile) used in that time."""
    def cpu():
        with open(f"/proc/self/task/{rpc.agent.current.listener.cover.native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    before = cpu()
    time.sleep(seconds)
    return cpu() - before


def fence_for(seconds):
    """Make this worker's fenced requests wait up to `seconds` (until `open_fence`)."""
    gate = state["gate"] = rpc.Future()
    timer = threading.Timer(seconds, open_fence)
    timer.daemon = True
    timer.start()
    rpc.agent.current.fence([gate])


def open_fence():
    gate = state.get("gate")
    if gate is not None and not gate.done():
        gate.set_result(None)


def call_within(to, seconds):
    """The outcome of a call from this worker to `to` with timeout `seconds`."""
    try:
        return rpc.rpc_sync(to, whoami, timeout=seconds)
    except rpc.RpcTimeoutError as exc:
        return f"RpcTimeoutError: {exc}"


def break_releases(broken, held=False):
    """Make this worker's context releases fail (or work again); `held`: each failing
    release first waits until they are repaired, so it outlasts the agent's timeout."""
    handler = rpc.agent.current.handlers["dist_release"]
    if broken:
        state["release"] = handler.run
        repaired = state["releases repaired"] = threading.Event()

        def refuse(sender, context_id):
            if held:
                repaired.wait(60)
            raise_value_error("release refused")
        handler.run = refuse
    else:
        handler.run = state.pop("release")
        state.pop("releases repaired").set()
