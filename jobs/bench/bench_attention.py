"""scaled_dot_product_attention's speed and memory against PyTorch's, at GPT sizes.

    python jobs/bench/bench_attention.py [--rounds 20] [--steps 3] [--no-causal]
                                         [--shape B H T D ...]

One step is forward and backward of attention on q, k, v of shape (B, H, T, D), float32,
causal unless --no-causal, one BLAS thread. The shapes by default: jobs/train_gpt.py's
attention (16, 4, 64, 16), bench_models.py's GPT (16, 4, 64, 32), and a larger GPT's
(16, 8, 256, 64). Four runners, interleaved round after round so a busy neighbour slows all
alike, each round's time the thread's CPU time; medians and median ratios to torch:

- mpigrad: F.scaled_dot_product_attention, the fused op (block by block, forward and fused
  backward; kernels/compiled/attention.py);
- composition: the same attention composed of mpigrad ops (a product, the masked softmax op,
  a product), the path before the fused op, which keeps the (B, H, T, T) weights;
- torch: torch's default CPU kernel (a fused one);
- numpy floor: the composition's arithmetic in plain numpy with a hand-written backward and
  no graph.

Then the peak of numpy's allocations (tracemalloc) during one step of each mpigrad runner,
against the size of one (B, H, T, T) float32 array.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402

SHAPES = [(16, 4, 64, 16), (16, 4, 64, 32), (16, 8, 256, 64)]


def _composed(q, k, v, causal, scale):
    keep = np.tri(q.shape[-2], k.shape[-2], dtype=bool) if causal else None
    weights = mg.ops.masked_softmax((q * scale) @ k.transpose(-2, -1), keep, dim=-1)
    return weights @ v


def runners(shape, causal):
    import torch  # only the benchmark needs torch
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    q, k, v, seed = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    scale = 1.0 / float(np.sqrt(shape[-1]))
    keep = np.tri(shape[2], dtype=bool)

    def ours():
        inputs = [mg.tensor(a, requires_grad=True) for a in (q, k, v)]
        F.scaled_dot_product_attention(*inputs, is_causal=causal).backward(mg.tensor(seed))

    def composition():
        inputs = [mg.tensor(a, requires_grad=True) for a in (q, k, v)]
        _composed(*inputs, causal, scale).backward(mg.tensor(seed))

    def theirs():
        inputs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
        torch.nn.functional.scaled_dot_product_attention(
            *inputs, is_causal=causal).backward(torch.tensor(seed))

    def numpy_floor():
        weights = (q * scale) @ k.swapaxes(-1, -2)
        if causal:
            np.copyto(weights, -np.inf, where=~keep)
        weights -= weights.max(-1, keepdims=True)
        np.exp(weights, out=weights)
        weights /= weights.sum(-1, keepdims=True)
        out = weights @ v
        grad_v = weights.swapaxes(-1, -2) @ seed
        grad_scores = seed @ v.swapaxes(-1, -2)
        grad_scores -= (grad_scores * weights).sum(-1, keepdims=True)
        grad_scores *= weights
        return out, grad_scores @ k * scale, grad_scores.swapaxes(-1, -2) @ q * scale, grad_v

    return {"mpigrad": ours, "composition": composition, "torch": theirs,
            "numpy floor": numpy_floor}


def peak_bytes(run):
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench(shape, causal, rounds, steps):
    runs = runners(shape, causal)
    times = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm-up (and the kernels' compilation or cache load)
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.thread_time()
            for _ in range(steps):
                run()
            times[name].append((time.thread_time() - start) / steps)
    print(f"shape {shape}, {'causal' if causal else 'not causal'}")
    for name, values in times.items():
        ratios = [a / b for a, b in zip(values, times["torch"])]
        print(f"  {name:12s} {statistics.median(values) * 1e3:8.2f} ms per step, "
              f"{statistics.median(ratios):.2f}x torch")
    full = np.prod(shape[:3], dtype=np.int64) * shape[2] * 4
    for name in ("mpigrad", "composition"):
        peak = peak_bytes(runs[name])
        print(f"  {name:12s} peak {peak / 2 ** 20:8.2f} MiB of numpy allocations "
              f"({peak / full:.2f}x one (B, H, T, T) float32 array)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3, help="steps timed per round")
    parser.add_argument("--no-causal", dest="causal", action="store_false")
    parser.add_argument("--shape", type=int, nargs=4, action="append", metavar=("B", "H", "T", "D"),
                        help="a (batch, heads, tokens, head size) to run; repeatable")
    args = parser.parse_args()
    for shape in args.shape or SHAPES:
        bench(tuple(shape), args.causal, args.rounds, args.steps)


if __name__ == "__main__":
    main()
