"""scaled_dot_product_attention's speed against PyTorch's, on a GPT-sized call.

    python jobs/bench/bench_attention.py [--rounds 40] [--steps 5] [--no-causal]

One step is forward and backward of attention on q, k, v of shape (16, 4, 64, 32) (batch,
heads, tokens, head size; a small GPT's), float32, causal unless --no-causal, one BLAS thread
(torch's default CPU kernel, a fused one, against mpigrad's composition of a product, the
masked softmax op and a product). Beside them runs the floor a dedicated mpigrad op could
reach: the same arithmetic in plain numpy, forward and hand-written backward, with no graph.
The three run interleaved round after round, so a busy neighbour slows all alike; each
round's time is the thread's CPU time; the medians and the median ratios are printed.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402

SHAPE = (16, 4, 64, 32)


def runners(causal):
    import torch  # only the benchmark needs torch
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    q, k, v, seed = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4))
    scale = 1.0 / float(np.sqrt(SHAPE[-1]))
    keep = np.tri(SHAPE[2], dtype=bool)

    def ours():
        inputs = [mg.tensor(a, requires_grad=True) for a in (q, k, v)]
        F.scaled_dot_product_attention(*inputs, is_causal=causal).backward(mg.tensor(seed))

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

    return {"mpigrad": ours, "torch": theirs, "numpy floor": numpy_floor}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=5, help="steps timed per round")
    parser.add_argument("--no-causal", dest="causal", action="store_false")
    args = parser.parse_args()
    runs = runners(args.causal)
    times = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm-up
    for _ in range(args.rounds):
        for name, run in runs.items():
            start = time.thread_time()
            for _ in range(args.steps):
                run()
            times[name].append((time.thread_time() - start) / args.steps)
    for name, values in times.items():
        ratios = [a / b for a, b in zip(values, times["torch"])]
        print(f"{name:12s} {statistics.median(values) * 1e3:7.2f} ms per step, "
              f"{statistics.median(ratios):.2f}x torch")


if __name__ == "__main__":
    main()
