"""Jacobian-vector products on an MLP: forward mode against the double-vjp trick and PyTorch.

    python jobs/bench/bench_jvp.py [--batch 256] [--width 512] [--rounds 9] [--repeat 5]

J v of a 784-W-W-W-10 tanh MLP (float64, one BLAS thread) with respect to its input:
mpigrad's `autograd.functional.jvp` (dual tensors, one forward pass; like torch's, it records
the graph so that func may take gradients itself, and drops it); the double-vjp trick it used
before (forward, a backward with create_graph, a second backward); `torch.func.jvp`; and a
plain forward pass of each library (what one forward pass costs). They run interleaved in
rounds on the same weights and data, so a noisy neighbour slows all alike; the median round
is reported, as ratios, in wall-clock time and in the process's CPU time (on a shared
machine the second is the steadier: it leaves out the time other jobs held the core).
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import functional  # noqa: E402


def make_weights(width, seed=0):
    rng = np.random.default_rng(seed)
    sizes = [784, width, width, width, 10]
    return [(rng.uniform(-1, 1, (n_out, n_in)) / np.sqrt(n_in), rng.uniform(-1, 1, n_out))
            for n_in, n_out in zip(sizes[:-1], sizes[1:])]


def mlp(lib, weights):
    weights = [(lib.tensor(w), lib.tensor(b)) for w, b in weights]
    linear = lib.nn.functional.linear

    def f(x):
        for i, (w, b) in enumerate(weights):
            x = linear(x, w, b)
            if i < len(weights) - 1:
                x = x.tanh()
        return x
    return f


def double_vjp_jvp(func, x, v):
    """The trick functional.jvp used before forward mode: J v as the gradient, with respect to
    a dummy cotangent u, of the vector-Jacobian product u^T J."""
    with mg.enable_grad():
        x = x.detach().requires_grad_(True)
        out = func(x)
        u = mg.zeros(*out.shape, dtype=out.dtype, requires_grad=True)
        (g,) = mg.autograd.grad(out, x, u, create_graph=True)
        (jv,) = mg.autograd.grad(g, u, v)
    return out.detach(), jv


def timed(fn, repeat):
    """(wall seconds, CPU seconds) per call."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - wall) / repeat, (time.process_time() - cpu) / repeat


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import torch  # the baseline only; mpigrad never imports it
    torch.set_num_threads(1)

    weights = make_weights(args.width)
    rng = np.random.default_rng(1)
    xv, vv = rng.standard_normal((args.batch, 784)), rng.standard_normal((args.batch, 784))
    f_mg, f_torch = mlp(mg, weights), mlp(torch, weights)
    x, v = mg.tensor(xv), mg.tensor(vv)
    tx, tv = torch.tensor(xv), torch.tensor(vv)

    methods = {
        "mpigrad forward mode (functional.jvp)": lambda: functional.jvp(f_mg, x, v)[1].numpy(),
        "mpigrad double vjp (the old jvp)": lambda: double_vjp_jvp(f_mg, x, v)[1].numpy(),
        "mpigrad forward pass alone": lambda: f_mg(x).numpy(),
        "torch.func.jvp": lambda: torch.func.jvp(f_torch, (tx,), (tv,))[1].numpy(),
        "torch forward pass alone": lambda: f_torch(tx).numpy(),
    }
    results = {name: fn() for name, fn in methods.items()}
    reference = results["torch.func.jvp"]
    for name in ("mpigrad forward mode (functional.jvp)", "mpigrad double vjp (the old jvp)"):
        np.testing.assert_allclose(results[name], reference, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{name} disagrees with torch.func.jvp")

    times = {name: [] for name in methods}
    for _ in range(args.rounds):
        for name, fn in methods.items():
            times[name].append(timed(fn, args.repeat))
    wall = {name: statistics.median(w for w, _ in t) for name, t in times.items()}
    cpu = {name: statistics.median(c for _, c in t) for name, t in times.items()}
    ours = "mpigrad forward mode (functional.jvp)"
    print(f"J v of a 784-{args.width}-{args.width}-{args.width}-10 tanh MLP, batch {args.batch}, "
          f"float64, 1 thread; median of {args.rounds} interleaved rounds of {args.repeat} calls")
    print(f"{'method':40s} {'wall ms':>8s} {'CPU ms':>8s} {'forward mode / this':>20s}")
    print(f"{'':40s} {'':8s} {'':8s} {'wall':>9s} {'CPU':>9s}")
    for name in methods:
        print(f"{name:40s} {wall[name] * 1e3:8.2f} {cpu[name] * 1e3:8.2f} "
              f"{wall[ours] / wall[name]:9.2f} {cpu[ours] / cpu[name]:9.2f}")


if __name__ == "__main__":
    main()
