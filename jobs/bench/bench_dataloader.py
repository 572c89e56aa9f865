"""DataLoader with worker processes: one pass over a dataset whose samples cost real CPU work,
in mpigrad and PyTorch, with 0 and with `--workers` worker processes.

    python jobs/bench/bench_dataloader.py [--samples 256] [--workers 2] [--rounds 5] [--step-ms 0]

Each sample is a 3x32x32 image made from a 3x64x64 one (random crop of a padded image, flip,
a 9x9 box blur, 2x2 downsampling, normalisation: a few milliseconds of numpy, as decoding and
augmenting a photo costs). The same dataset class serves both
libraries. Workers are persistent, so a pass measures loading, not start-up; start-up (spawn for
mpigrad, PyTorch's default start method) is timed separately. The contenders run interleaved in
rounds and the median round is reported.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from mpigrad.data import DataLoader  # noqa: E402


class AugmentedImages:
    """Sample i: a fixed random image, augmented with randomness from numpy's global state
    (which the loaders seed per worker)."""

    def __init__(self, n, size=64, pad=4):
        self.n, self.size, self.pad = n, size, pad
        self.images = np.random.default_rng(0).random((16, 3, size + 2 * pad, size + 2 * pad),
                                                      dtype=np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        image = self.images[index % len(self.images)]
        top, left = np.random.randint(0, 2 * self.pad + 1, size=2)
        crop = image[:, top:top + self.size, left:left + self.size]
        if np.random.random() < 0.5:
            crop = crop[:, :, ::-1]
        blurred = np.zeros_like(crop)
        padded = np.pad(crop, ((0, 0), (4, 4), (4, 4)), mode="reflect")
        for dy in range(9):
            for dx in range(9):
                blurred += padded[:, dy:dy + self.size, dx:dx + self.size]
        blurred /= 81
        small = blurred.reshape(3, self.size // 2, 2, self.size // 2, 2).mean(axis=(2, 4))
        normalised = (small - small.mean(axis=(1, 2), keepdims=True)) / (
            small.std(axis=(1, 2), keepdims=True) + 1e-6)
        return normalised.astype(np.float32), index % 10


def one_pass(loader, step_seconds=0.0):
    """Seconds for a pass, with `step_seconds` of CPU work per batch in this process (the
    training step the workers' loading overlaps with)."""
    start = time.perf_counter()
    count = 0
    for _, labels in loader:
        count += len(labels)
        end = time.process_time() + step_seconds
        while time.process_time() < end:
            pass
    return time.perf_counter() - start, count


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="CPU milliseconds of simulated training per batch in the main process")
    args = p.parse_args()
    dataset = AugmentedImages(args.samples)
    kwargs = dict(batch_size=args.batch_size, shuffle=True)
    parallel = dict(num_workers=args.workers, persistent_workers=True)
    loaders = {"mpigrad, 0 workers": DataLoader(dataset, **kwargs)}
    startup = {}
    start = time.perf_counter()
    loaders[f"mpigrad, {args.workers} workers"] = DataLoader(dataset, **kwargs, **parallel)
    one_pass(loaders[f"mpigrad, {args.workers} workers"])
    startup["mpigrad"] = time.perf_counter() - start
    try:
        import torch
        from torch.utils.data import DataLoader as TorchLoader
        torch.set_num_threads(1)
        loaders["torch, 0 workers"] = TorchLoader(dataset, **kwargs)
        start = time.perf_counter()
        loaders[f"torch, {args.workers} workers"] = TorchLoader(dataset, **kwargs, **parallel)
        one_pass(loaders[f"torch, {args.workers} workers"])
        startup["torch"] = time.perf_counter() - start
    except ImportError:
        print("torch is not installed: mpigrad only")
    times = {name: [] for name in loaders}
    for _ in range(args.rounds):
        for name, loader in loaders.items():
            seconds, count = one_pass(loader, args.step_ms / 1e3)
            assert count == args.samples
            times[name].append(seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.samples} samples, batch {args.batch_size}, {args.step_ms} ms of training per "
          f"batch, median of {args.rounds} rounds "
          f"(first pass with workers, start-up included: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in startup.items()) + ")")
    for name, seconds in median.items():
        print(f"  {name:<22} {seconds * 1e3:8.1f} ms/pass  {args.samples / seconds:7.0f} samples/s")
    base = median["mpigrad, 0 workers"]
    print(f"mpigrad speed-up with {args.workers} workers: "
          f"{base / median[f'mpigrad, {args.workers} workers']:.2f} x")
    if "torch, 0 workers" in median:
        print(f"torch speed-up with {args.workers} workers: "
              f"{median['torch, 0 workers'] / median[f'torch, {args.workers} workers']:.2f} x; "
              f"mpigrad / torch pass time with workers: "
              f"{median[f'mpigrad, {args.workers} workers'] / median[f'torch, {args.workers} workers']:.2f}")


if __name__ == "__main__":
    main()
