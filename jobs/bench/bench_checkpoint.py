"""Memory and time of a training step with and without activation checkpointing.

    python jobs/bench/bench_checkpoint.py [--rounds 5] [--steps 3]

The model of the autograd notes' table: 12 blocks of Linear(256, 256) + ReLU, batch 2048,
float32, one BLAS thread, the loss `out.sum()`. Four ways to run a step:

- forward only: under no_grad, nothing is kept for backward;
- forward + backward: every block's activation is kept until backward reaches it;
- checkpointed: `checkpoint_sequential(model, 3, x)`, 3 segments of 4 blocks (the first two
  recomputed in backward, the last kept, as torch does);
- gradient accumulation: 4 micro-batches of 512, each forward + backward.

Peak memory is what the step allocates above what existed before it (the parameters and the
batch), gradients included: for mpigrad from tracemalloc (numpy reports its buffers to it),
for PyTorch from its memory profiler's allocation timeline. Times are medians over rounds in
which the contenders run interleaved, without any memory tracing.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
from mpigrad.utils.checkpoint import checkpoint_sequential  # noqa: E402

BLOCKS, WIDTH, BATCH, SEGMENTS, MICRO = 12, 256, 2048, 3, 4
MODES = ("forward only", "forward + backward", "checkpointed (3 segments)",
         f"grad accumulation ({MICRO} x {BATCH // MICRO})")


def make_weights(seed=0):
    rng = np.random.default_rng(seed)
    bound = 1 / np.sqrt(WIDTH)
    return [(rng.uniform(-bound, bound, (WIDTH, WIDTH)).astype(np.float32),
             rng.uniform(-bound, bound, WIDTH).astype(np.float32)) for _ in range(BLOCKS)]


def build(lib, weights):
    blocks = []
    for w, b in weights:
        linear = lib.nn.Linear(WIDTH, WIDTH)
        linear.weight = lib.nn.Parameter(lib.tensor(w.copy()))
        linear.bias = lib.nn.Parameter(lib.tensor(b.copy()))
        blocks.append(lib.nn.Sequential(linear, lib.nn.ReLU()))
    return lib.nn.Sequential(*blocks)


def steps(lib, model, x):
    """One function per mode, each a whole step from gradients set to None."""
    if lib is mg:
        sequential = checkpoint_sequential
    else:
        from torch.utils.checkpoint import checkpoint_sequential as sequential

    def clear():
        for p in model.parameters():
            p.grad = None

    def forward_only():
        with lib.no_grad():
            model(x)

    def forward_backward():
        clear()
        model(x).sum().backward()

    def checkpointed():
        clear()
        sequential(model, SEGMENTS, x, use_reentrant=False).sum().backward()

    def accumulated():
        clear()
        for part in x.split(BATCH // MICRO):
            model(part).sum().backward()

    return dict(zip(MODES, (forward_only, forward_backward, checkpointed, accumulated)))


def mpigrad_peak(step):
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def torch_peak(step):
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        step()
    current = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            current += size
        elif action == Action.DESTROY:
            current -= size
        peak = max(peak, current)
    return peak


def grads_of(model):
    return [p.grad.detach().numpy().copy() for p in model.parameters()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per mode per round")
    args = parser.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None

    weights = make_weights()
    x_np = np.random.default_rng(1).standard_normal((BATCH, WIDTH)).astype(np.float32)
    contenders = {"mpigrad": steps(mg, build(mg, weights), mg.tensor(x_np))}
    if torch is not None:
        contenders["torch"] = steps(torch, build(torch, weights), torch.tensor(x_np))

    # Gradients: checkpointing must give the plain ones exactly, accumulation to rounding.
    model = build(mg, weights)
    run = steps(mg, model, mg.tensor(x_np))
    run[MODES[1]]()
    plain = grads_of(model)
    run[MODES[2]]()
    checkpointed = grads_of(model)
    run[MODES[3]]()
    accumulated = grads_of(model)
    exact = all(np.array_equal(a, b) for a, b in zip(plain, checkpointed))
    accum_err = max(float(np.abs(a - b).max() / np.abs(a).max())
                    for a, b in zip(plain, accumulated))

    peaks = {"mpigrad": {m: mpigrad_peak(f) for m, f in contenders["mpigrad"].items()}}
    if torch is not None:
        peaks["torch"] = {m: torch_peak(f) for m, f in contenders["torch"].items()}

    times = {name: {m: [] for m in MODES} for name in contenders}
    for _ in range(args.rounds):
        for mode in MODES:
            for name, fns in contenders.items():
                fns[mode]()  # warm up the allocator for this shape of step
                start = time.perf_counter()
                for _ in range(args.steps):
                    fns[mode]()
                times[name][mode].append((time.perf_counter() - start) / args.steps)
    med = {name: {m: statistics.median(v) for m, v in t.items()} for name, t in times.items()}

    print(f"{BLOCKS} blocks Linear({WIDTH},{WIDTH})+ReLU, batch {BATCH}, float32; "
          f"median of {args.rounds} rounds x {args.steps} steps")
    header = "| mode | mpigrad peak MiB | x f+b | mpigrad ms | x f+b |"
    if torch is not None:
        header += " torch peak MiB | x f+b | torch ms | x f+b | mpigrad/torch time |"
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for mode in MODES:
        row = f"| {mode} |"
        for name in contenders:
            p, t = peaks[name][mode], med[name][mode]
            row += (f" {p / 2**20:.1f} | {p / peaks[name][MODES[1]]:.2f} | {t * 1e3:.1f} | "
                    f"{t / med[name][MODES[1]]:.2f} |")
        if torch is not None:
            row += f" {med['mpigrad'][mode] / med['torch'][mode]:.2f} |"
        print(row)
    memory_ratio = peaks["mpigrad"][MODES[2]] / peaks["mpigrad"][MODES[1]]
    time_ratio = med["mpigrad"][MODES[2]] / med["mpigrad"][MODES[1]]
    print(f"checkpointed / plain: peak {memory_ratio:.2f} (target <= 0.65), time "
          f"{time_ratio:.2f} (target <= 1.4); gradients equal to the plain ones: {exact}; "
          f"accumulated gradients' largest relative difference: {accum_err:.1e}")


if __name__ == "__main__":
    main()
