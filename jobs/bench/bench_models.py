"""Training steps of the models of the day against PyTorch, with the issue's targets.

    python jobs/bench/bench_models.py [--steps 5] [--rounds 7] [--threads 1]
                                      [--only gpt lm resnet mlp cnn] [--memory gpt ...]
                                      [--profile [missed|all]] [--breakdown]

gpt: nanoGPT's model with scaled_dot_product_attention (4 layers, 4 heads, n_embd 128, block
64, vocabulary 96, tied embedding), batch 16; zero_grad, forward, cross-entropy, backward,
clip_grad_norm_(1.0), AdamW (no decay on biases and norms). Target <= 1.0x torch.
lm: pytorch/examples' word-language model (embedding 200, a 2-layer LSTM of 200 units, a
linear decoder, vocabulary 1000; no dropout) on one truncated-BPTT chunk of 35 time steps x
20 columns from a zero state; SGD (lr 20) after clip_grad_norm_(0.25). Target <= 1.10x.
resnet: a torchvision-style ResNet of BasicBlocks (a 3x3 stem of 16 channels, two blocks of
16 and two of 32 channels, the first of them strided with a 1x1 projection, BatchNorm2d,
AdaptiveAvgPool2d, a linear classifier) on 3x32x32 images, batch 32. Target <= 1.25x.
mlp: 784-1024-1024-1024-10 with ReLU, batch 64. Target <= 0.95x.
cnn: the distributed tutorial's CNN (two 5x5 convs, max-pools, two linear layers) on 1x28x28
images, batch 64. Target <= 1.0x.
resnet, mlp and cnn train with SGD (lr 0.05, momentum 0.9). The models are models.py's,
written once for both libraries; all in float32, from the same weights and data.

Timing: the libraries run interleaved in one process (so torch runs under the allocator
settings mpigrad makes at import), round after round, alternating which goes first; the
ratio is the median of the rounds' own ratios mpigrad / torch, with quartiles. One thread:
the running thread's CPU time (a busy neighbour's time slices do not count). `--threads N`:
both libraries on N threads (torch.set_num_threads, mpigrad.set_num_threads) and wall time.

Peak memory (`--memory`, the GPT by default; target <= torch's): each library in a fresh
child process of its own, measured the same way (child_memory below): the growth of the
process's peak resident set over the steps above its size once a warm-up step's leftovers
are freed and trimmed.

`--profile`: for each model that misses a target (or `all`), what bounds the step: the time
in matrix products (GEMM; convolutions and their gradients' GEMMs) against the rest, for
both libraries, and the costliest kernels, from instrumented runs. `--breakdown`: mpigrad's
step by bench_engine's categories.
"""
from harness import (CATEGORIES, TORCH_GEMM, TORCH_RECURRENT, breakdown,  # first: threads
                     gemm_share, kernel_profile, print_breakdown, time_call,
                     torch_op_profile, use_threads)
import harness  # noqa: E402

import argparse  # noqa: E402
import collections  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import models  # noqa: E402

VOCAB, BLOCK = 96, 64
LM_VOCAB, LM_BPTT, LM_BATCH = 1000, 35, 20


def gpt(lib):
    return models.gpt(lib, VOCAB, BLOCK, n_layer=4, n_head=4, n_embd=128)


def gpt_batch(rng):
    return rng.integers(0, VOCAB, (16, BLOCK)), rng.integers(0, VOCAB, (16, BLOCK))


def images(shape, batch):
    def make(rng):
        return (rng.standard_normal((batch,) + shape).astype(np.float32),
                rng.integers(0, 10, batch))
    return make


def lm_batch(rng):
    return (rng.integers(0, LM_VOCAB, (LM_BPTT, LM_BATCH)),
            rng.integers(0, LM_VOCAB, (LM_BPTT, LM_BATCH)))


def adamw(lib, params):
    """nanoGPT's AdamW: weight decay on matrices only."""
    return lib.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95))


def sgd(lib, params):
    return lib.optim.SGD(params, lr=0.05, momentum=0.9)


def plain_sgd(lib, params):
    """word_language_model's update: p -= lr * grad, lr 20."""
    return lib.optim.SGD(params, lr=20.0)


Workload = collections.namedtuple("Workload", "build batch optimizer clip target")
# The targets: mpigrad's step time at most this many times torch's.
MODELS = {"gpt": Workload(gpt, gpt_batch, adamw, 1.0, 1.0),
          "lm": Workload(models.word_lm, lm_batch, plain_sgd, 0.25, 1.10),
          "resnet": Workload(models.resnet, images((3, 32, 32), 32), sgd, None, 1.25),
          "mlp": Workload(models.mlp, images((784,), 64), sgd, None, 0.95),
          "cnn": Workload(models.tutorial_cnn, images((1, 28, 28), 64), sgd, None, 1.0)}
MEMORY_TARGET = 1.0  # the GPT step's peak memory at most torch's


class Step:
    """One training step of a model of MODELS in `lib`: zero_grad, forward, cross-entropy over
    the last dimension, backward, optional clipping, the optimizer."""

    def __init__(self, lib, model, x, y, optimizer, clip):
        self.lib, self.model, self.clip = lib, model, clip
        self.x, self.y = lib.from_numpy(x), lib.from_numpy(y)
        self.optimizer = optimizer(lib, list(model.parameters()))

    def forward(self):
        self.optimizer.zero_grad()
        out = self.model(self.x)
        return self.lib.nn.functional.cross_entropy(out.view(-1, out.shape[-1]),
                                                    self.y.view(-1))

    def __call__(self):
        loss = self.forward()
        loss.backward()
        if self.clip is not None:
            self.lib.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        return loss.item()


def model_steps(name, torch, libs=("mpigrad", "torch")):
    """Model `name`'s step in each of `libs`, from the same weights and the same batch."""
    work = MODELS[name]
    x, y = work.batch(np.random.default_rng(0))
    mg.manual_seed(0)
    ours = work.build(mg)
    steps = {}
    if "mpigrad" in libs:
        steps["mpigrad"] = Step(mg, ours, x, y, work.optimizer, work.clip)
    if torch is not None and "torch" in libs:
        theirs = work.build(torch)
        with torch.no_grad():
            for (_, p), (_, q) in zip(ours.state_dict().items(), theirs.state_dict().items()):
                q.copy_(torch.from_numpy(p.numpy().copy()))
        steps["torch"] = Step(torch, theirs, x, y, work.optimizer, work.clip)
    return steps


# ----------------------------------------------------------------------------- peak memory
def peak_growth_in_child(name, lib, steps, threads):
    """MiB by which a fresh process's peak RSS grows over `steps` steps of `lib`'s model."""
    result = subprocess.run([sys.executable, __file__, "--child-memory", name, lib, "--steps",
                             str(steps), "--threads", str(threads)],
                            capture_output=True, text=True, check=True)
    return float(result.stdout.split()[-1])


def child_memory(name, lib, steps, threads):
    """Print the growth of this process's peak resident set (MiB) over `steps` training steps
    of a fresh model, measured the same way for both libraries: a throw-away copy of the model
    takes one step first (imports, compiled kernels loaded or compiled, first-touch caches),
    is dropped and the heap trimmed (malloc_trim: what the allocator keeps cached would
    otherwise hide the steps' own demand), then the peak is reset and measured from the
    resident size at that moment. The growth is what a step needs beyond its model's weights:
    gradients, optimizer state, activations, scratch and the allocator's fragmentation."""
    torch = None
    if lib == "torch":
        import torch
    use_threads(threads, torch)
    model_steps(name, torch, libs=(lib,))[lib]()
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    step = model_steps(name, torch, libs=(lib,))[lib]
    # Linux: writing 5 to clear_refs resets the peak (VmHWM) to the current size.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    for _ in range(steps):
        step()
    print((_status_kib("VmHWM") - before) / 1024)


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


# ----------------------------------------------------------------------------- the run
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="steps per round (default 5)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads of each library (default 1; above 1 times wall clock)")
    parser.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--memory", nargs="*", choices=list(MODELS), default=["gpt"],
                        help="models whose peak memory is compared (default gpt; none: "
                             "--memory with no names)")
    parser.add_argument("--breakdown", action="store_true",
                        help="split mpigrad's step by category (bench_engine's)")
    parser.add_argument("--profile", nargs="?", const="missed", choices=["missed", "all"],
                        help="per-kernel time of both libraries, products against the rest, "
                             "for the models that miss their target (or all)")
    parser.add_argument("--child-memory", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: the spread of the ratios needs two")
    if args.child_memory:
        child_memory(*args.child_memory, args.steps, args.threads)
        return
    harness.clock = harness.CLOCKS["cpu" if args.threads == 1 else "wall"]
    try:
        import torch
    except ImportError:
        torch = None
        print("torch is not installed: mpigrad times only")
    use_threads(args.threads, torch)
    print(f"median of {args.rounds} interleaved rounds of {args.steps} steps, float32, "
          f"{args.threads} thread(s) per library, "
          f"{'CPU time of the thread' if args.threads == 1 else 'wall time'}")
    timed = {name: bench_model(name, torch, args) for name in args.only}
    if args.profile and torch is not None:
        for name, (met, medians) in timed.items():
            if args.profile == "all" or not met:
                print_profile(name, torch, args.steps, medians)


def bench_model(name, torch, args):
    """Time model `name` in both libraries: whether its targets are met (or untimed), and
    each library's median seconds per step."""
    steps = model_steps(name, torch)
    first = {lib: run() for lib, run in steps.items()}
    print(f"\n{name}: first-step loss " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
    times = {lib: [] for lib in steps}
    for round_number in range(args.rounds):
        for lib, run in list(steps.items())[::(-1) ** round_number]:
            times[lib].append(time_call(run, args.steps))
    row = f"  {name:7s} mpigrad {statistics.median(times['mpigrad']) * 1e3:8.2f} ms/step"
    met = True
    if torch is not None:
        ratios = [m / t for m, t in zip(times["mpigrad"], times["torch"])]
        low, _, high = statistics.quantiles(ratios, n=4)
        ratio, target = statistics.median(ratios), MODELS[name].target
        met = ratio <= target
        row += (f"   torch {statistics.median(times['torch']) * 1e3:8.2f} ms/step   ratio "
                f"{ratio:.2f}x [{low:.2f}, {high:.2f}]   target <= {target:.2f}x "
                f"{'met' if met else 'MISSED'}")
    print(row)
    if name in args.memory:
        growth = {lib: peak_growth_in_child(name, lib, args.steps, args.threads)
                  for lib in steps}
        row = "  peak memory growth over the steps (MiB): " + ", ".join(
            f"{lib} {mib:.1f}" for lib, mib in growth.items())
        if "torch" in growth:
            ratio = growth["mpigrad"] / growth["torch"]
            met = met and ratio <= MEMORY_TARGET
            row += (f"; ratio {ratio:.2f}x, target <= {MEMORY_TARGET:.2f}x "
                    f"{'met' if ratio <= MEMORY_TARGET else 'MISSED'}")
        print(row)
    if args.breakdown:
        print("  mpigrad's step by category (ms per step, instrumented; clipping not timed)")
        print_breakdown(name, breakdown(steps["mpigrad"], args.steps))
    return met, {lib: statistics.median(t) for lib, t in times.items()}


def print_profile(name, torch, steps, medians, top=12):
    """What bounds model `name`'s step in each library: the time in matrix products (BLAS
    GEMMs; convolutions: mpigrad's GEMMs without their im2col, oneDNN's whole kernels) and in
    whole recurrences against everything else, then the costliest kernels. Instrumented runs: mpigrad's kernels timed by the benchmark's
    KernelTimer (exclusive, harness.clock), torch's ATen ops by its profiler (self time, wall
    clock); both add their own cost, so each split is read as shares, also shown applied to
    the library's timed step (`medians`)."""
    runs = model_steps(name, torch)
    for run in runs.values():
        run()
    ours = kernel_profile(runs["mpigrad"], steps)
    theirs = torch_op_profile(torch, runs["torch"], steps)
    print(f"\n{name}: where the step goes (ms per step: the instrumented runs' shares of the "
          "timed step; then the costliest kernels, instrumented ms and share)")
    for lib, parts, names in (("mpigrad", ours, (CATEGORIES["gemm"], CATEGORIES["recurrent"])),
                              ("torch", theirs, (TORCH_GEMM, TORCH_RECURRENT))):
        gemm, recurrences, rest = gemm_share(parts, *names)
        # The shares applied to the timed step: ms that compare across the libraries.
        scale = medians[lib] * 1e3 / (gemm + recurrences + rest)
        print(f"  {lib:8s} timed {medians[lib] * 1e3:7.2f} = products {gemm * scale:7.2f} "
              + (f"+ whole recurrences (products and gates) {recurrences * scale:7.2f} "
                 if recurrences else "")
              + f"+ the rest {rest * scale:7.2f}")
    for lib, parts in (("mpigrad", ours), ("torch", theirs)):
        total = sum(parts.values())
        costliest = sorted(parts.items(), key=lambda kv: -kv[1])[:top]
        print(f"  {lib}'s costliest: " + ", ".join(
            f"{k} {v:.2f} ({v / total:.0%})" for k, v in costliest))


if __name__ == "__main__":
    main()
