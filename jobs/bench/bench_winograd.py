"""Winograd F(2x2, 3x3) against the column paths (im2col and a GEMM; the input's gradient a
correlation of g) for 3x3 stride-1 convolutions, op by op.

    python jobs/bench/bench_winograd.py [--reps 15] [--threads 1]

Times conv2d's forward, its input's gradient (conv_transpose2d) and its weight's gradient
(conv2d_weight) on both paths, float32, padding 1, at the shapes of the CIFAR-shaped CNN of
jobs/bench/bench_engine.py, bench_models' ResNet and a few more. The two paths alternate rep
by rep, so a busy neighbour slows both alike; medians of the process's CPU time on one
thread, of wall time on `--threads N` (set_num_threads) are reported.
conv/_WINOGRAD_FROM's thresholds come from this table, at one thread and two.
"""
import harness  # first: one BLAS thread per process unless told otherwise

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from mpigrad.kernels.numpy import conv  # noqa: E402

# (batch, in channels, out channels, image size)
SHAPES = [(32, 64, 64, 16), (32, 64, 64, 8), (32, 64, 64, 32), (32, 32, 32, 32),
          (32, 32, 32, 16), (32, 32, 32, 8), (32, 16, 16, 16)]
OPS = ("conv2d", "conv_transpose2d", "conv2d_weight")
PATHS = {"im2col": (1 << 62, 0), "winograd": (1, 1)}  # every op's _WINOGRAD_FROM


def calls(n, channels, out_channels, size, rng):
    x = rng.standard_normal((n, channels, size, size), np.float32)
    weight = rng.standard_normal((out_channels, channels, 3, 3), np.float32)
    g = rng.standard_normal((n, out_channels, size, size), np.float32)
    geometry = ((1, 1), (1, 1), (1, 1))
    return (lambda: conv.conv2d(x, weight, None, *geometry),
            lambda: conv.conv_transpose2d(g, weight, (size, size), *geometry),
            lambda: conv.conv2d_weight(x, g, (3, 3), *geometry))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    harness.use_threads(args.threads)
    clock = time.process_time if args.threads == 1 else time.perf_counter
    rng = np.random.default_rng(0)
    print(f"median ms of {args.reps} alternating reps, float32, {args.threads} thread(s), "
          f"{'cpu' if args.threads == 1 else 'wall'} time")
    print(f"{'batch, channels in/out, size':30}" + "".join(f"{op:>26}" for op in OPS))
    for shape in SHAPES:
        ops = calls(*shape, rng)
        times = {(path, op): [] for path in PATHS for op in OPS}
        for _ in range(args.reps + 1):  # the first rep warms the work arrays
            for path, threshold in PATHS.items():
                conv._WINOGRAD_FROM = dict.fromkeys(OPS, threshold)
                for op, call in zip(OPS, ops):
                    start = clock()
                    call()
                    times[path, op].append(clock() - start)
        cells = []
        for op in OPS:
            before, after = (statistics.median(times[path, op][1:]) * 1e3 for path in PATHS)
            cells.append(f"{before:7.1f} -> {after:6.1f} ({after / before:.2f}x)")
        print(f"{str(shape):30}" + "".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
