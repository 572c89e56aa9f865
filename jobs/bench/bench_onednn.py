"""oneDNN, the library torch's convolutions run on, from its wheel, against mpigrad's numpy
kernels: each convolution layer of bench_models' ResNet and tutorial CNN (forward, input
gradient, weight gradient) in the numpy kernels, in oneDNN (mpigrad/kernels/onednn, the path
float32 convolutions take where it is installed) and in torch; then oneDNN's sgemm against
numpy's BLAS on the GPT's, the MLP's and the word LM's products; then LSTM layers on oneDNN's
LSTM primitive against linear and mpigrad's compiled recurrence. One thread, thread CPU time,
the median of the rounds (docs/benchmarks.md, "oneDNN from its wheel").

    python jobs/bench/bench_onednn.py [--rounds 11]

oneDNN picks its own (blocked) layouts: each timed call includes the reorders from and to
mpigrad's NCHW / OIHW arrays, as every call from the op layer does.
"""
import harness  # noqa: F401  (first: one thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad  # noqa: E402
from mpigrad.kernels import onednn  # noqa: E402
from mpigrad.kernels.numpy import conv as kernels  # noqa: E402
from mpigrad.kernels.onednn import conv as onednn_conv  # noqa: E402
# (batch, channels, image size, output channels, stride, kernel, padding)
LAYERS = {"ResNet 16 ch 32x32": (32, 16, 32, 16, 1, 3, 1),
          "ResNet 32 ch 16x16": (32, 32, 16, 32, 1, 3, 1),
          "ResNet 16->32 stride 2": (32, 16, 32, 32, 2, 3, 1),
          "ResNet stem": (32, 3, 32, 16, 1, 3, 1),
          "CNN conv1": (64, 1, 28, 10, 1, 5, 0),
          "CNN conv2": (64, 10, 12, 20, 1, 5, 0)}
# (M, K, N): the GPT's layers forward and backward, the MLP's, the word LM's decoder and input
# projection, and the LSTM's step products.
PRODUCTS = [(1024, 128, 384), (1024, 128, 128), (1024, 128, 512), (1024, 512, 128),
            (384, 1024, 128), (128, 1024, 512), (64, 784, 1024), (64, 1024, 1024),
            (700, 200, 1000), (700, 200, 800), (20, 200, 800), (20, 800, 200)]


def median_ms(run, rounds, repeats=1):
    run()
    return 1e3 * statistics.median(harness.time_call(run, repeats) for _ in range(rounds))


def numpy_kernels(call):
    def run():
        with mpigrad.backends.mkldnn.flags(enabled=False):
            return call()
    return run


def compare_convolutions(torch, rounds):
    rng = np.random.default_rng(0)
    print("convolution layers, ms: numpy kernels / oneDNN / torch")
    for name, (n, c, size, o, stride, k, padding) in LAYERS.items():
        x = rng.standard_normal((n, c, size, size), dtype=np.float32)
        w = rng.standard_normal((o, c, k, k), dtype=np.float32) / np.float32(k * np.sqrt(c))
        out = (size + 2 * padding - k) // stride + 1
        g = rng.standard_normal((n, o, out, out), dtype=np.float32)
        geometry = (stride, stride), (padding, padding), (1, 1)
        ours = [numpy_kernels(call) for call in (
            lambda: kernels.conv2d(x, w, None, *geometry),
            lambda: kernels.conv_transpose2d(g, w, (size, size), *geometry),
            lambda: kernels.conv2d_weight(x, g, (k, k), *geometry))]
        # oneDNN's entry points themselves, also where the kernels keep a call for numpy
        dnnl = (lambda: onednn_conv.conv2d(x, w, None, *geometry, (out, out)),
                lambda: onednn_conv.conv_transpose2d(g, w, (size, size), *geometry),
                lambda: onednn_conv.conv2d_weight(x, g, (k, k), *geometry))
        tx, tw, tg = map(torch.from_numpy, (x, w, g))

        def torch_gradient(which):
            return lambda: torch.ops.aten.convolution_backward(
                tg, tx, tw, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1, which)
        theirs = (lambda: torch.nn.functional.conv2d(tx, tw, None, stride, padding),
                  torch_gradient([True, False, False]), torch_gradient([False, True, False]))
        row = []
        for what, mine, call, torch_call in zip(("forward", "input grad", "weight grad"),
                                                ours, dnnl, theirs):
            np.testing.assert_allclose(call(), mine(), rtol=1e-3, atol=1e-3, err_msg=what)
            row.append(f"{what} {median_ms(mine, rounds):5.2f} / {median_ms(call, rounds):5.2f}"
                       f" / {median_ms(torch_call, rounds):5.2f}")
        print(f"  {name:24s}", " | ".join(row))


def compare_products(dnnl, torch, rounds):
    rng = np.random.default_rng(1)
    print("products (M, K, N), us: numpy's BLAS / oneDNN's sgemm / torch")
    totals = np.zeros(3)
    for m, k, n in PRODUCTS:
        a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
        out, theirs = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.empty(m, n)
        dnnl.gemm(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4)
        repeats = max(1, int(1e8 // (m * n * k)))
        times = np.array([median_ms(run, rounds, repeats) for run in (
            lambda: np.matmul(a, b, out=theirs), lambda: dnnl.gemm(a, b, out),
            lambda: torch.mm(ta, tb, out=tout))]) * 1e3
        totals += times
        print(f"  {str((m, k, n)):18s}", " / ".join(f"{t:7.0f}" for t in times))
    print(f"  {'total':18s}", " / ".join(f"{t:7.0f}" for t in totals))


# (steps, batch, inputs, hidden): the word LM's LSTM layers, train_lm.py's, a wider one
LSTM_LAYERS = [(35, 20, 200, 200), (35, 10, 128, 128), (35, 32, 512, 512)]


def compare_lstm_layers(torch, rounds):
    """One LSTM layer's forward and backward through nn.LSTM: linear and mpigrad's compiled
    recurrence (the flag off), oneDNN's LSTM primitive (ops.lstm_layer), torch's."""
    rng = np.random.default_rng(2)
    print("LSTM layers (T, N, I, H), forward and backward, ms: linear + recurrence / oneDNN / "
          "torch")
    for steps, batch, inputs, hidden in LSTM_LAYERS:
        x = rng.standard_normal((steps, batch, inputs), dtype=np.float32)
        g = rng.standard_normal((steps, batch, hidden), dtype=np.float32)
        ours = mpigrad.nn.LSTM(inputs, hidden, dtype=mpigrad.float32)
        theirs = torch.nn.LSTM(inputs, hidden)

        def step(lib, module):
            x_, g_ = lib.from_numpy(x).requires_grad_(), lib.from_numpy(g)
            return lambda: module(x_)[0].backward(g_)
        runs = (numpy_kernels(step(mpigrad, ours)), step(mpigrad, ours), step(torch, theirs))
        for run in runs:
            run()
        # interleaved round by round: a layer takes tens of ms, long enough for a busy
        # neighbour to come and go between one runner's rounds and the next's
        times = [[] for _ in runs]
        for _ in range(rounds):
            for run, kept in zip(runs, times):
                kept.append(harness.time_call(run, 1))
        ms = [1e3 * statistics.median(kept) for kept in times]
        print(f"  {str((steps, batch, inputs, hidden)):20s}",
              " / ".join(f"{t:6.2f}" for t in ms))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    dnnl = onednn.library()
    if dnnl is None:
        sys.exit(f"oneDNN: {onednn.unavailable_reason()}")
    import torch
    torch.set_num_threads(1)
    compare_convolutions(torch, args.rounds)
    compare_products(dnnl, torch, args.rounds)
    compare_lstm_layers(torch, args.rounds)


if __name__ == "__main__":
    main()
