"""Engine overhead: one training step of a 4-layer MLP in mpigrad, hand-written numpy and PyTorch.

    python jobs/bench/bench_autograd.py [--steps 20] [--rounds 7]

Each step is forward + backward + SGD on a 784-1024-1024-1024-10 MLP, batch 64, float32, one
BLAS thread. The three run interleaved in rounds on the same weights and data, so a noisy
neighbour slows all of them alike; the median round is reported, as ratios.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
from mpigrad import nn, optim  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402

SIZES = [784, 1024, 1024, 1024, 10]
LR = 0.01


def make_weights(seed):
    rng = np.random.default_rng(seed)
    # Scale before the cast: a numpy float64 scalar would promote float32 arrays.
    return [((rng.uniform(-1, 1, (n_out, n_in)) / np.sqrt(n_in)).astype(np.float32),
             (rng.uniform(-1, 1, n_out) / np.sqrt(n_in)).astype(np.float32))
            for n_in, n_out in zip(SIZES[:-1], SIZES[1:])]


class NumpyMLP:
    """The same step written by hand: what the engine's overhead is measured against."""

    def __init__(self, weights):
        self.weights = [(w.copy(), b.copy()) for w, b in weights]

    def step(self, x, y):
        activations = [x]
        h = x
        for i, (w, b) in enumerate(self.weights):
            z = h @ w.T
            z += b
            h = np.maximum(z, 0) if i < len(self.weights) - 1 else z
            activations.append(h)
        shifted = z - z.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, y]))
        g = exp / total
        g[rows, y] -= 1
        g /= len(y)
        for i in reversed(range(len(self.weights))):
            w, b = self.weights[i]
            grad_w = g.T @ activations[i]
            grad_b = g.sum(axis=0)
            if i > 0:
                g = g @ w
                g *= activations[i] > 0
            w -= LR * grad_w
            b -= LR * grad_b
        return loss


class MpigradMLP:
    def __init__(self, weights):
        layers = []
        for w, b in weights:
            linear = nn.Linear(w.shape[1], w.shape[0])
            linear.weight.data[...] = w
            linear.bias.data[...] = b
            layers += [linear, nn.ReLU()]
        self.model = nn.Sequential(*layers[:-1])
        self.optimizer = optim.SGD(self.model.parameters(), lr=LR)

    def step(self, x, y):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


class TorchMLP:
    def __init__(self, weights):
        import torch
        torch.set_num_threads(1)
        self.torch = torch
        layers = []
        for w, b in weights:
            linear = torch.nn.Linear(w.shape[1], w.shape[0])
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(w))
                linear.bias.copy_(torch.from_numpy(b))
            layers += [linear, torch.nn.ReLU()]
        self.model = torch.nn.Sequential(*layers[:-1])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR)

    def step(self, x, y):
        self.optimizer.zero_grad()
        loss = self.torch.nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def time_steps(model, x, y, steps):
    start = time.perf_counter()
    for _ in range(steps):
        model.step(x, y)
    return (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per round (default 20)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((args.batch_size, SIZES[0])).astype(np.float32)
    y_np = rng.integers(0, SIZES[-1], args.batch_size)
    weights = make_weights(1)
    runners = {"numpy": (NumpyMLP(weights), x_np, y_np),
               "mpigrad": (MpigradMLP(weights), mg.from_numpy(x_np), mg.from_numpy(y_np))}
    try:
        import torch
        runners["torch"] = (TorchMLP(weights), torch.from_numpy(x_np), torch.from_numpy(y_np))
    except ImportError:
        print("torch is not installed: comparing with hand-written numpy only")

    first = {name: model.step(x, y) for name, (model, x, y) in runners.items()}
    spread = max(first.values()) - min(first.values())
    print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items())
          + f" (spread {spread:.2e})")
    times = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, (model, x, y) in runners.items():
            times[name].append(time_steps(model, x, y, args.steps))
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {args.batch_size}, float32, 1 thread; "
          f"median of {args.rounds} rounds x {args.steps} steps")
    for name, t in median.items():
        print(f"  {name:8s} {t * 1e3:8.2f} ms/step")
    print(f"mpigrad / numpy = {median['mpigrad'] / median['numpy']:.3f}  (target <= 1.15)")
    if "torch" in median:
        print(f"mpigrad / torch = {median['mpigrad'] / median['torch']:.3f}  (target <= 0.85)")


if __name__ == "__main__":
    main()
