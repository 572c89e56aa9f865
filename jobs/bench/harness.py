"""What the benchmarks share, so that they do not import one another.

Imported first by every benchmark (before numpy): one BLAS/OpenMP thread per process unless
the caller set otherwise, so that ranks and the torch side do not fight over cores.

- The data-parallel workload of bench_ddp, bench_link and bench_zero: the MLP
  784-1024-1024-1024-10, batch 64 per rank, SGD with momentum, in mpigrad and in torch, and
  `timed`, the slowest rank's mean step time.
- `time_call` and the clocks, and `breakdown`: one instrumented training step split into numpy
  kernels by kind, the optimizer and the Python overhead of dispatch and of the engine
  (bench_engine, bench_models); `kernel_profile` and `torch_op_profile`, a step's time per
  kernel in each library, and `gemm_share` (bench_models --profile); `use_threads`.
- `init_torch_gloo`: torch.distributed over gloo inside an mpiexec job (bench_ddp,
  bench_fsdp, bench_ddp_gpt, ...).
The models themselves are in models.py, written once for both libraries.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import collections  # noqa: E402
import gc  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

import mpigrad as mg  # noqa: E402  (before numpy: it sets OpenBLAS's wait, read at load)
import numpy as np  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import kernels  # noqa: E402
from mpigrad.kernels.numpy import conv as conv_ops  # noqa: E402
from mpigrad.ops.core import Op  # noqa: E402
from models import MLP_SIZES, mlp  # noqa: E402

SIZES = MLP_SIZES
BATCH = 64


def batch(rank):
    rng = np.random.default_rng(rank)
    return (rng.standard_normal((BATCH, SIZES[0])).astype(np.float32),
            rng.integers(0, SIZES[-1], BATCH).astype(np.int64))


def timed(comm, step, steps):
    """Seconds per step, the slowest rank's mean over `steps`."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return max(comm.allgather((time.perf_counter() - start) / steps))


class MlpStep:
    """A training step of the benchmark's MLP (`model`, wrapped or not, with optimizer
    `opt`) on this rank's batch; the benchmarks of DDP, links and ZeRO build on it."""

    def __init__(self, rank, model, opt):
        self.model, self.opt = model, opt
        x, y = batch(rank)
        self.x, self.y = mg.tensor(x), mg.tensor(y)

    def step(self):
        self.opt.zero_grad()
        F.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()


class TorchRun:
    """The same step in PyTorch DDP (`ddp_options`: DistributedDataParallel's keywords)."""

    def __init__(self, torch, rank, **ddp_options):
        self.torch = torch
        self.model = torch.nn.parallel.DistributedDataParallel(mlp(torch), **ddp_options)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        x, y = batch(rank)
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def step(self):
        self.opt.zero_grad()
        self.torch.nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()


def init_torch_gloo(comm, master_addr="127.0.0.1", interface=None):
    """torch.distributed over gloo among the ranks of `comm` (rank 0 picks a free port on
    `master_addr`), one intra-op thread per rank; returns torch. `interface`: gloo's network
    interface (GLOO_SOCKET_IFNAME) when the hosts' default one is not the link to use."""
    import torch  # the oracle, only when a benchmark compares against it
    import torch.distributed as tdist
    torch.set_num_threads(1)
    if interface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    port = None
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind((master_addr, 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    tdist.init_process_group("gloo", init_method=f"tcp://{master_addr}:{port}",
                             rank=comm.Get_rank(), world_size=comm.Get_size())
    return torch


# ----------------------------------------------------------------------------- timing
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


def time_call(run, steps):
    gc.collect()
    start = clock()
    for _ in range(steps):
        run()
    return (clock() - start) / steps


# ----------------------------------------------------------------------------- breakdown
# Ops and kernels by category; nested timers count exclusively (a convolution's GEMM time is
# its own time less the im2col and col2im inside it).
CATEGORIES = {"gemm": {"matmul", "linear", "conv2d", "conv_transpose2d", "conv2d_weight"},
              "im2col/col2im": {"unfold", "fold", "_im2col_into", "_fold_into"},
              "pooling": {"max_pool2d", "tap_scatter", "tap_gather", "winning_taps",
                          "take_along_dim", "scatter_along", "argmax"},
              "recurrent": {"lstm", "gru", "rnn_tanh", "rnn_relu"}}
# Module-level functions timed besides the ops, where they exist.
KERNELS = [(conv_ops, "_im2col_into"), (conv_ops, "_fold_into"), (conv_ops, "winning_taps"),
           (mg.ops.reduction, "argmax")]


def _category(name):
    for category, names in CATEGORIES.items():
        if name in names:
            return category
    return "elementwise/other"


class KernelTimer:
    """Wraps every forward and fused backward kernel of the backend in use (forwards are
    called by backward's rules too), the one backward function of each joint Op (a
    recurrence's whole backward through time) and a few kernels with timers, and adds up
    seconds per kernel name, exclusive of nested timed calls."""

    def __init__(self):
        self.seconds = collections.Counter()
        self._backend = kernels.current()
        self._tables = [(table, dict(table)) for table in (self._backend.forwards,
                                                            self._backend.backwards)]
        self._ops = {o: o.vjps for o in gc.get_objects() if type(o) is Op and o.joint}
        self._functions = [(module, name, getattr(module, name)) for module, name in KERNELS
                           if hasattr(module, name)]
        self._nested = [0.0]

    def _wrap(self, name, fn):
        def timed(*args, **kwargs):
            self._nested.append(0.0)
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = clock() - start
                self.seconds[name] += elapsed - self._nested.pop()
                self._nested[-1] += elapsed
        return timed

    def __enter__(self):
        for table, original in self._tables:
            table.update({name: self._wrap(name, fn) for name, fn in original.items()})
        for op, vjps in self._ops.items():
            op.vjps = self._wrap(op.name, vjps)
        for module, name, fn in self._functions:
            setattr(module, name, self._wrap(name, fn))
        return self

    def __exit__(self, *exc):
        for table, original in self._tables:
            table.update(original)
        for op, vjps in self._ops.items():
            op.vjps = vjps
        for module, name, fn in self._functions:
            setattr(module, name, fn)

    def take(self):
        seconds = dict(self.seconds)
        self.seconds.clear()
        self._nested = [0.0]
        return seconds


def _by_category(seconds):
    totals = collections.Counter()
    for name, t in seconds.items():
        totals[_category(name)] += t
    return totals


def breakdown(step, steps):
    """Milliseconds per step in each category, averaged over `steps` instrumented steps."""
    totals = collections.Counter()
    with KernelTimer() as kernels:
        for _ in range(steps):
            start = clock()
            loss = step.forward()
            forward = clock() - start
            forward_kernels = _by_category(kernels.take())
            start = clock()
            loss.backward()
            backward = clock() - start
            backward_kernels = _by_category(kernels.take())
            start = clock()
            step.optimizer.step()
            totals["optimizer"] += clock() - start
            kernels.take()
            for seconds in (forward_kernels, backward_kernels):
                totals.update(seconds)
            totals["overhead: forward dispatch"] += forward - sum(forward_kernels.values())
            totals["overhead: backward engine"] += backward - sum(backward_kernels.values())
    return {k: v / steps * 1e3 for k, v in totals.items()}


def kernel_profile(run, steps):
    """Milliseconds per step of `run` (a whole training step) in each kernel, exclusive,
    and under "(outside kernels)" the rest: Python dispatch, the engine, the optimizer's and
    clipping's own numpy."""
    with KernelTimer() as kernels:
        start = clock()
        for _ in range(steps):
            run()
        total = clock() - start
        seconds = kernels.take()
    seconds["(outside kernels)"] = total - sum(seconds.values())
    return {k: v / steps * 1e3 for k, v in seconds.items()}


# torch's ATen ops whose own time is a BLAS or oneDNN product, for the same split; and its
# whole recurrences (oneDNN's LSTM/GRU layers: their products and gate arithmetic together,
# as mpigrad's recurrent ops).
TORCH_GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
              "aten::mkldnn_convolution", "aten::convolution_backward",
              "aten::thnn_conv2d", "aten::_slow_conv2d_forward",
              "aten::_slow_conv2d_backward"}
TORCH_RECURRENT = {"aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"}


def torch_op_profile(torch, run, steps):
    """Milliseconds per step of `run` in each ATen op (self time, wall clock, torch's
    profiler; its own cost lands on the ops and under "(outside ops)")."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]):  # the profiler's first start is slow
        run()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
    total = time.perf_counter() - start
    seconds = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()
               if e.self_cpu_time_total > 0}
    seconds["(outside ops)"] = max(0.0, total - sum(seconds.values()))
    return {k: v / steps * 1e3 for k, v in seconds.items()}


def gemm_share(parts, gemm_names, recurrent_names):
    """(ms in the named products, ms in whole recurrences, ms in everything else)."""
    gemm = sum(v for k, v in parts.items() if k in gemm_names)
    recurrent = sum(v for k, v in parts.items() if k in recurrent_names)
    return gemm, recurrent, sum(parts.values()) - gemm - recurrent


def use_threads(n, torch=None):
    """Run mpigrad (its compiled kernels and numpy's BLAS) and torch on `n` threads each."""
    mg.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def print_breakdown(name, parts):
    total = sum(parts.values())
    order = ["gemm", "im2col/col2im", "pooling", "recurrent", "elementwise/other",
             "optimizer", "overhead: forward dispatch", "overhead: backward engine"]
    # A category a model has no op of (recurrent in a convnet) is left out, not shown as 0.
    cells = [f"{k} {parts[k]:.2f} ({parts[k] / total:.0%})" for k in order if k in parts]
    print(f"  {name:9s} {total:7.2f} ms = " + ", ".join(cells))
