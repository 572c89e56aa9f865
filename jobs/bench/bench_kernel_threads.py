"""The compiled loops on one thread and on several: each threaded loop of
kernels/compiled/ on the GPT step's shapes (jobs/train_gpt.py's batch 16 x 64 positions,
512-wide activations, 65 classes), in interleaved rounds, median time per call; and the
threading layer's cost of one launch on a tiny input. By default the layer mpigrad picks (omp
where oneDNN is loaded, else tbb where its wheel is installed); `--layer` names one.

    python jobs/bench/bench_kernel_threads.py [--threads 2] [--layer tbb|workqueue|omp]
"""
import argparse
import os
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layer", choices=["tbb", "workqueue", "omp"],
                        help="numba's threading layer (default: mpigrad's choice)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.layer:
        os.environ["NUMBA_THREADING_LAYER"] = args.layer  # read when the loops are imported
    import numpy as np

    import mpigrad as mg
    from mpigrad.kernels import onednn
    from mpigrad.kernels.compiled import activations, clip, indexing, recurrent, softmax

    onednn.library()  # loaded, as a float32 model's first product loads it: mpigrad's choice

    rng = np.random.default_rng(0)
    rows, width, classes = 16 * 64, 512, 65
    x = rng.standard_normal(rows * 4 * width).astype(np.float32)  # the MLP's hidden layer
    out = np.empty_like(x)
    scores = rng.standard_normal((rows, classes)).astype(np.float32)
    attention = rng.standard_normal((16 * 8 * 64, 64)).astype(np.float32)  # (B H T, T)
    target = rng.integers(0, classes, rows)
    weight = np.ones(classes, np.float32)
    tops, log_totals = np.empty(rows, np.float32), np.empty(rows, np.float32)  # forward's
    gates = [rng.standard_normal((rows, 4 * width)).astype(np.float32) for _ in range(2)]
    bias = rng.standard_normal(4 * width).astype(np.float32)
    state = rng.standard_normal((rows, 2 * width)).astype(np.float32)  # [h, c]
    positions = rng.integers(0, classes, rows)
    table = np.zeros((1, classes, width), np.float32)
    grads = rng.standard_normal((1, rows, width)).astype(np.float32)
    cases = {
        "gelu f32": (activations.gelu_f32, lambda: (x, out)),
        "gelu backward f32": (activations.gelu_backward_f32, lambda: (x, x, out)),
        "softmax (attention rows)": (softmax.softmax,
                                     lambda: (attention, False, np.empty_like(attention))),
        "cross-entropy": (softmax.cross_entropy, lambda: (scores, target, weight, -100, 0.0,
                                                          False, np.empty(rows, np.float32),
                                                          tops, log_totals)),
        "cross-entropy backward": (softmax.cross_entropy_backward,
                                   lambda: (np.ones(rows, np.float32), scores, target, weight,
                                            -100, 0.0, False, tops, log_totals,
                                            np.empty_like(scores))),
        "lstm step": (recurrent.lstm_step, lambda: (*gates, bias, state, False,
                                                    np.empty((rows, 6 * width), np.float32))),
        "embedding backward": (indexing.add_along, lambda: (table, grads, positions)),
        "clip total (p=2)": (clip.add_powers, lambda: (x, 2.0, 0.0)),
    }
    counts = sorted({1, args.threads})
    times = {(name, n): [] for name in cases for n in counts}
    for name, (kernel, arguments) in cases.items():  # compile (or load) every twin first
        for n in counts:
            mg.set_num_threads(n)
            kernel(*arguments())
    for _ in range(args.rounds):
        for name, (kernel, arguments) in cases.items():
            for n in counts:
                mg.set_num_threads(n)
                call = arguments()
                calls = 20
                start = time.perf_counter()
                for _ in range(calls):
                    kernel(*call)
                times[name, n].append((time.perf_counter() - start) / calls)
    import numba
    print(f"layer {numba.threading_layer()}, {args.threads} threads against 1, "
          f"median of {args.rounds} rounds (ms per call)")
    for name in cases:
        one = np.median(times[name, 1]) * 1e3
        many = np.median(times[name, args.threads]) * 1e3
        print(f"  {name:26s} {one:8.3f} {many:8.3f}  x{one / many:.2f}")
    tiny = np.ones(2 * activations.silu_f32.grain, np.float32)
    tiny_out = np.empty_like(tiny)
    for n in counts:
        mg.set_num_threads(n)
        activations.silu_f32(tiny, tiny_out)
        start = time.perf_counter()
        for _ in range(200):
            activations.silu_f32(tiny, tiny_out)
        print(f"  silu on two grains ({tiny.size} elements), {n} thread(s): "
              f"{(time.perf_counter() - start) / 200 * 1e6:.1f} us")


if __name__ == "__main__":
    main()
