"""Training-step speed against PyTorch: two CNNs, an MLP and a graph of tiny ops.

    python jobs/bench/bench_engine.py [--steps 10] [--rounds 7] [--tiny-ops 10000] [--only NAME ...]
                                [--ops]

Each model step is zero_grad, forward, cross-entropy, backward and SGD (lr 0.01, momentum
0.9), float32, one BLAS thread, both frameworks starting from the same weights and data:

- tutorial: the distributed tutorial's CNN (conv 1->10 k5, max-pool 2, relu, conv 10->20 k5,
  max-pool 2, relu, fc 320->50, relu, fc 50->10), batch 64 of 1x28x28;
- cifar: three 3x3 convs of 64 channels with padding 1 (each + relu), max-pool 2 after the
  first two, fc 4096->10, batch 32 of 3x32x32;
- mlp: 784-1024-1024-1024-10 with relu, batch 64;
- tiny: forward and backward through a chain of scalar ops (per-node cost of the engine and
  of op dispatch), reported per node.

mpigrad and PyTorch run interleaved, round after round, so a busy neighbour slows both alike;
the median of the rounds is reported, with the median (and quartiles) of each round's own
ratio mpigrad / PyTorch, which a slow spell shared by both leaves alone. Times are the CPU
time of the running thread (both libraries compute on it with one BLAS thread), so time
slices lost to other processes on a shared machine do not count; `--clock wall` measures
wall time instead. Then one instrumented
step of each model splits mpigrad's time by category: numpy kernels by kind (GEMM,
im2col/col2im, pooling, elementwise), the optimizer, and what is left, the Python overhead of
op dispatch in forward and of the engine in backward. `--ops` then times the tutorial CNN's
convolutions and poolings alone, mpigrad's numpy kernels against torch's ATen calls.
"""
import harness  # first: sets threads

import argparse  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from harness import breakdown, print_breakdown, time_call  # noqa: E402
from mpigrad import optim  # noqa: E402
from mpigrad.kernels.numpy import conv as conv_ops  # noqa: E402
import models  # noqa: E402

LR, MOMENTUM = 0.01, 0.9


def cifar_cnn(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


# name: (builder, input shape without the batch, batch size)
MODELS = {"tutorial": (models.tutorial_cnn, (1, 28, 28), 64),
          "cifar": (cifar_cnn, (3, 32, 32), 32),
          "mlp": (models.mlp, (784,), 64)}


class MpigradStep:
    def __init__(self, model, x, y):
        self.model, self.x, self.y = model, mg.from_numpy(x), mg.from_numpy(y)
        self.optimizer = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def forward(self):
        self.optimizer.zero_grad()
        return F.cross_entropy(self.model(self.x), self.y)

    def __call__(self):
        loss = self.forward()
        loss.backward()
        self.optimizer.step()
        return loss.item()


class TorchStep:
    def __init__(self, torch, model, x, y):
        self.torch, self.model = torch, model
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def __call__(self):
        self.optimizer.zero_grad()
        loss = self.torch.nn.functional.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def model_runners(name, torch):
    build, shape, batch = MODELS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch,) + shape).astype(np.float32)
    y = rng.integers(0, 10, batch)
    mg.manual_seed(0)
    model = build(mg)
    runners = {"mpigrad": MpigradStep(model, x, y)}
    if torch is not None:
        twin = build(torch)
        with torch.no_grad():
            for (key, p), (_, q) in zip(model.state_dict().items(), twin.state_dict().items()):
                q.copy_(torch.from_numpy(p.numpy().copy()))
        runners["torch"] = TorchStep(torch, twin, x, y)
    return runners


class TinyGraph:
    """`nodes` scalar ops in a chain, then backward: the cost per node of recording and
    running the graph, where the numpy work is negligible."""

    def __init__(self, lib, nodes):
        self.lib, self.nodes = lib, nodes
        self.x = lib.tensor(1.0, requires_grad=True)

    def __call__(self):
        y = self.x
        for _ in range(self.nodes // 2):
            y = y * 1.0001
            y = y + 0.5
        y.backward()
        self.x.grad = None
        return y.item()


def tiny_runners(nodes, torch):
    runners = {"mpigrad": TinyGraph(mg, nodes)}
    if torch is not None:
        runners["torch"] = TinyGraph(torch, nodes)
    return runners


# ----------------------------------------------------------------------------- per op
# The tutorial CNN's convolutions and poolings alone: (name, input shape, weight shape).
TUTORIAL_CONVS = [("conv1", (64, 1, 28, 28), (10, 1, 5, 5)),
                  ("conv2", (64, 10, 12, 12), (20, 10, 5, 5))]
TUTORIAL_POOLS = [("pool1", (64, 10, 24, 24)), ("pool2", (64, 20, 8, 8))]


def op_kernels(torch):
    """(row, mpigrad kernel, torch kernel) for each of the tutorial's conv and pool passes,
    on numpy arrays (mpigrad's op kernels, without autograd) and torch's ATen calls."""
    rng = np.random.default_rng(0)
    one, none = (1, 1), (0, 0)
    rows = []
    for name, x_shape, w_shape in TUTORIAL_CONVS:
        x, w = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape))
        b = np.zeros(w_shape[0], np.float32)
        g = rng.standard_normal(conv_ops.conv2d(x, w, b, one, none, one).shape).astype(
            np.float32)
        xt, wt, bt, gt = map(torch.from_numpy, (x, w, b, g))

        def backward(mask, gt=gt, xt=xt, wt=wt):
            return lambda: torch.ops.aten.convolution_backward(
                gt, xt, wt, [wt.shape[0]], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)
        rows.append((f"{name} forward", lambda x=x, w=w, b=b: conv_ops.conv2d(
            x, w, b, one, none, one), lambda xt=xt, wt=wt, bt=bt: torch.nn.functional.conv2d(
            xt, wt, bt)))
        rows.append((f"{name} input grad", lambda g=g, w=w, size=x_shape[2:]:
                     conv_ops.conv_transpose2d(g, w, size, one, none, one),
                     backward([True, False, False])))
        rows.append((f"{name} weight+bias grad", lambda x=x, g=g, k=w_shape[2:]:
                     (conv_ops.conv2d_weight(x, g, k, one, none, one), g.sum((0, 2, 3))),
                     backward([False, True, True])))
    pool = dict(kernel_size=(2, 2), stride=(2, 2), padding=none, dilation=one, extra=none)
    for name, shape in TUTORIAL_POOLS:
        x = rng.standard_normal(shape).astype(np.float32)
        m = conv_ops.max_pool2d(x, **pool)
        g = rng.standard_normal(m.shape).astype(np.float32)
        xt = torch.from_numpy(x).requires_grad_()
        mt, gt = torch.nn.functional.max_pool2d(xt, 2), torch.from_numpy(g)
        rows.append((f"{name} forward", lambda x=x: conv_ops.max_pool2d(x, **pool),
                     lambda xt=xt: torch.nn.functional.max_pool2d(xt, 2)))
        rows.append((f"{name} backward", lambda x=x, m=m, g=g: conv_ops.tap_scatter(
            g, conv_ops.winning_taps(x, m, **pool), x.shape[2:], **pool),
            lambda mt=mt, xt=xt, gt=gt: torch.autograd.grad(mt, xt, gt, retain_graph=True)))
    return rows


def print_op_table(torch, rounds, reps=10):
    print("\nthe tutorial CNN's convolutions and poolings alone (ms per call, median of "
          f"{rounds} interleaved rounds of {reps} calls; ratio: median of the rounds' own)")
    print(f"  {'':24s} {'mpigrad':>8s} {'torch':>8s} {'ratio':>6s}")
    for name, mine, theirs in op_kernels(torch):
        times = {"mpigrad": [], "torch": []}
        for round_number in range(rounds):
            pair = [("mpigrad", mine), ("torch", theirs)][::(-1) ** round_number]
            for lib, run in pair:
                times[lib].append(time_call(run, reps))
        ratio = statistics.median(m / t for m, t in zip(times["mpigrad"], times["torch"]))
        print(f"  {name:24s} {statistics.median(times['mpigrad']) * 1e3:8.3f} "
              f"{statistics.median(times['torch']) * 1e3:8.3f} {ratio:5.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per round (default 10)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--tiny-ops", type=int, default=10000,
                        help="ops in the tiny-op chain (default 10000)")
    parser.add_argument("--only", nargs="+", choices=list(MODELS) + ["tiny"],
                        help="run only these benchmarks")
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--ops", action="store_true",
                        help="also time the tutorial CNN's convolutions and poolings alone")
    parser.add_argument("--clock", choices=list(harness.CLOCKS), default="cpu",
                        help="thread CPU time (default) or wall time")
    args = parser.parse_args()
    harness.clock = harness.CLOCKS[args.clock]
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
        print("torch is not installed: mpigrad times only")

    names = args.only or list(MODELS) + ["tiny"]
    benches = {}
    for name in names:
        runners = tiny_runners(args.tiny_ops, torch) if name == "tiny" \
            else model_runners(name, torch)
        first = {lib: run() for lib, run in runners.items()}
        if name != "tiny":
            print(f"{name}: first-step loss " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
        benches[name] = runners

    times = {(name, lib): [] for name, runners in benches.items() for lib in runners}
    for round_number in range(args.rounds):
        for name, runners in benches.items():
            steps = 1 if name == "tiny" else args.steps
            # Alternate who goes first, so neither always runs on caches the other warmed.
            order = list(runners.items())[::(-1) ** round_number]
            for lib, run in order:
                times[name, lib].append(time_call(run, steps))
    print(f"\nmedian of {args.rounds} interleaved rounds ({args.steps} steps each; tiny: one "
          f"chain of {args.tiny_ops} ops), float32, 1 thread, {args.clock} time; the ratio is "
          "the median of the rounds' own ratios, with their quartiles")
    print(f"  {'':9s} {'mpigrad':>12s} {'torch':>12s} {'ratio':>7s} {'quartiles':>13s}")
    for name, runners in benches.items():
        med = {lib: statistics.median(times[name, lib]) for lib in runners}
        scale, unit = (1e6 / args.tiny_ops, "us/node") if name == "tiny" else (1e3, "ms/step")
        row = f"  {name:9s} {med['mpigrad'] * scale:8.2f} {unit[:2]:3s}"
        if "torch" in med:
            ratios = [m / t for m, t in zip(times[name, "mpigrad"], times[name, "torch"])]
            low, middle, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 \
                else ratios * 3
            row += (f" {med['torch'] * scale:8.2f} {unit[:2]:3s} "
                    f"{statistics.median(ratios):6.2f}x  [{low:.2f}, {high:.2f}]")
        print(row + f"   ({unit})")

    if not args.no_breakdown:
        print("\nmpigrad's step by category (ms per step, instrumented run: kernels timed inside "
              "each op; overhead = the rest of forward / backward)")
        for name, runners in benches.items():
            if name != "tiny":
                print_breakdown(name, breakdown(runners["mpigrad"], args.steps))

    if args.ops and torch is not None:
        print_op_table(torch, args.rounds)


if __name__ == "__main__":
    main()
