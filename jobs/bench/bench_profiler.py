"""What the profiler costs: nothing measurable when off, and how much when recording.

    python jobs/bench/bench_profiler.py [--rounds 9]

"off" is mpigrad as shipped, no profile recording: each op reads `profiler.active` once and
the engine reads its observer once per backward. "stripped" runs the same code with that
check taken out of the op path (ops call the recording-free `_apply` directly), which is
what mpigrad cost before the profiler. "on" records every op and node (no shapes, no
memory). Two workloads, interleaved in rounds, medians reported: a loop of tiny adds (where
the per-op cost shows most) and forward + backward + SGD of jobs/bench/bench_autograd.py's MLP.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import optim  # noqa: E402
from mpigrad.autograd import profiler  # noqa: E402
from mpigrad.ops import core  # noqa: E402

SIZES = [784, 1024, 1024, 1024, 10]


def tiny_ops(n=5000):
    a = mg.tensor(np.ones(4, np.float32), requires_grad=True)
    b = mg.tensor(np.ones(4, np.float32))
    start = time.perf_counter()
    for _ in range(n):
        a + b
    return (time.perf_counter() - start) / n


def make_step():
    rng = np.random.default_rng(0)
    params = []
    for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
        params += [mg.tensor((rng.uniform(-1, 1, (n_out, n_in)) / np.sqrt(n_in))
                             .astype(np.float32), requires_grad=True),
                   mg.tensor(np.zeros(n_out, np.float32), requires_grad=True)]
    opt = optim.SGD(params, lr=0.01)
    x = mg.tensor(rng.standard_normal((64, 784)).astype(np.float32))
    y = mg.tensor(rng.integers(0, 10, 64))

    def step(n=3):
        start = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            h = x
            for i in range(0, len(params), 2):
                h = F.linear(h, params[i], params[i + 1])
                if i < len(params) - 2:
                    h = h.relu()
            F.cross_entropy(h, y).backward()
            opt.step()
        return (time.perf_counter() - start) / n
    return step


def run_in(mode, fn):
    shipped = core.apply
    if mode == "stripped":
        core.apply = core._apply
    try:
        if mode == "on":
            with profiler.profile():
                return fn()
        return fn()
    finally:
        core.apply = shipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    step = make_step()
    workloads = {"tiny add (us/op)": (tiny_ops, 1e6), "MLP step (ms)": (step, 1e3)}
    modes = ("stripped", "off", "on")
    times = {(w, m): [] for w in workloads for m in modes}
    for w, (fn, _) in workloads.items():
        fn()  # warm up
    for _ in range(args.rounds):
        for w, (fn, _) in workloads.items():
            for m in modes:
                times[w, m].append(run_in(m, fn))
    print(f"median of {args.rounds} rounds, interleaved")
    print("| workload | stripped | off | on | off / stripped | on / stripped |")
    print("| --- | --- | --- | --- | --- | --- |")
    for w, (_, scale) in workloads.items():
        med = {m: statistics.median(times[w, m]) for m in modes}
        print(f"| {w} | {med['stripped'] * scale:.2f} | {med['off'] * scale:.2f} | "
              f"{med['on'] * scale:.2f} | {med['off'] / med['stripped']:.3f} | "
              f"{med['on'] / med['stripped']:.2f} |")


if __name__ == "__main__":
    main()
