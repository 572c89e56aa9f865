"""Single ops against PyTorch: the pointwise, reduction, normalisation, pooling and resampling
ops users' models call, forward alone and forward with backward, each on one realistic input.

    python jobs/bench/bench_ops.py [--rounds 5] [--only NAME ...] [--threshold 1.5]

Each op runs on a (64, 128, 256) float32 tensor (images: (32, 64, 32, 32)), under no_grad for
the forward, then as y = op(x); y.sum().backward() from a leaf. The two libraries alternate
op by op; each time is the best of `--rounds` of a few calls, in the running thread's CPU
time on one thread. An op slower than `--threshold` times torch's in either column is marked,
the list to work from: bench_models' steps show what a model loses, this shows which op.
"""
import harness  # noqa: F401  (first: one thread)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402

ROWS = (64, 128, 256)
IMAGES = (32, 64, 32, 32)


def _f(lib):
    return lib.nn.functional


# name: (op(lib, x), input shape); the same lambda runs on both libraries.
OPS = {
    "relu": (lambda L, x: _f(L).relu(x), ROWS),
    "leaky_relu": (lambda L, x: _f(L).leaky_relu(x, 0.1), ROWS),
    "gelu": (lambda L, x: _f(L).gelu(x), ROWS),
    "gelu_tanh": (lambda L, x: _f(L).gelu(x, approximate="tanh"), ROWS),
    "silu": (lambda L, x: _f(L).silu(x), ROWS),
    "sigmoid": (lambda L, x: L.sigmoid(x), ROWS),
    "tanh": (lambda L, x: L.tanh(x), ROWS),
    "elu": (lambda L, x: _f(L).elu(x), ROWS),
    "softplus": (lambda L, x: _f(L).softplus(x), ROWS),
    "exp": (lambda L, x: L.exp(x), ROWS),
    "mul_add": (lambda L, x: x * 2 + 1, ROWS),
    "where": (lambda L, x: L.where(x > 0, x, x * 0.1), ROWS),
    "sum_last": (lambda L, x: x.sum(-1), ROWS),
    "mean_middle": (lambda L, x: x.mean(1), ROWS),
    "var_last": (lambda L, x: x.var(-1), ROWS),
    "amax_last": (lambda L, x: x.amax(-1), ROWS),
    "max_last": (lambda L, x: x.max(-1).values, ROWS),
    "cumsum_last": (lambda L, x: x.cumsum(-1), ROWS),
    "norm": (lambda L, x: x.norm(), ROWS),
    "mse_loss": (lambda L, x: _f(L).mse_loss(x, x.detach() * 0.5), ROWS),
    "softmax_last": (lambda L, x: _f(L).softmax(x, -1), ROWS),
    "softmax_middle": (lambda L, x: _f(L).softmax(x, 1), ROWS),
    "log_softmax_last": (lambda L, x: _f(L).log_softmax(x, -1), ROWS),
    "layer_norm": (lambda L, x: _f(L).layer_norm(x, (256,)), ROWS),
    "dropout": (lambda L, x: _f(L).dropout(x, 0.1), ROWS),
    "transpose_copy": (lambda L, x: x.transpose(1, 2).contiguous(), ROWS),
    "cat": (lambda L, x: L.cat([x, x], 1), ROWS),
    "bmm": (lambda L, x: L.bmm(x, x.transpose(1, 2)), (64, 128, 64)),
    "batch_norm": (lambda L, x: _f(L).batch_norm(x, None, None, training=True), IMAGES),
    "group_norm": (lambda L, x: _f(L).group_norm(x, 8), IMAGES),
    "instance_norm": (lambda L, x: _f(L).instance_norm(x), IMAGES),
    "max_pool2d": (lambda L, x: _f(L).max_pool2d(x, 2), IMAGES),
    "avg_pool2d": (lambda L, x: _f(L).avg_pool2d(x, 2), IMAGES),
    "adaptive_avg_pool2d": (lambda L, x: _f(L).adaptive_avg_pool2d(x, 1), IMAGES),
    "interpolate_nearest": (lambda L, x: _f(L).interpolate(x, scale_factor=2), IMAGES),
    "interpolate_bilinear": (lambda L, x: _f(L).interpolate(x, scale_factor=2,
                                                           mode="bilinear"), IMAGES),
    "pad": (lambda L, x: _f(L).pad(x, (1, 1, 1, 1)), IMAGES),
}


def best_ms(run, rounds, calls=3):
    run()
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            run()
        best = min(best, (time.thread_time() - start) / calls)
    return best * 1e3


def measure(torch, op, shape, rounds):
    """(forward ms, forward + backward ms) for mpigrad, then for torch."""
    data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    times = []
    for lib in (mg, torch):
        x = lib.tensor(data, requires_grad=True)

        def forward():
            with lib.no_grad():
                op(lib, x)

        def both():
            op(lib, x).sum().backward()
            x.grad = None
        times.append((best_ms(forward, rounds), best_ms(both, rounds)))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=list(OPS), default=list(OPS))
    parser.add_argument("--threshold", type=float, default=1.5,
                        help="mark ops slower than this many times torch's (default 1.5)")
    args = parser.parse_args()
    import torch
    harness.use_threads(1, torch)
    print(f"ms, best of {args.rounds} rounds, float32, one thread: mpigrad / torch (ratio)")
    marked = []
    for name in args.only:
        op, shape = OPS[name]
        (ours_f, ours_b), (theirs_f, theirs_b) = measure(torch, op, shape, args.rounds)
        ratios = ours_f / theirs_f, ours_b / theirs_b
        slow = max(ratios) > args.threshold
        if slow:
            marked.append(name)
        print(f"  {name:22s} forward {ours_f:7.2f} / {theirs_f:7.2f} ({ratios[0]:4.1f}x)   "
              f"with backward {ours_b:7.2f} / {theirs_b:7.2f} ({ratios[1]:4.1f}x)"
              + ("   <" if slow else ""), flush=True)
    print(f"above {args.threshold}x torch's: {', '.join(marked) or 'none'}")


if __name__ == "__main__":
    main()
