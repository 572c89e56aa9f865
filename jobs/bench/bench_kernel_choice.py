"""Which technology for mpigrad's fused kernels: one kernel, exact GELU forward + backward on a
(16, 64, 512) float32 tensor, done four ways (docs/benchmarks.md, "Fused kernels: the choice"):

- numpy: mpigrad's former composition (fdlibm's erf evaluated region by region in numpy
  passes, then the arithmetic; the backward as numpy passes);
- scipy.special.erf, with numpy for the rest;
- numexpr, which has no erf: it can do only the tanh approximation, timed for reference;
- numba: mpigrad's kernels (kernels/compiled/activations.py).

Also each one's first-run cost (a new process; for numba an empty cache, so it compiles),
warm start-up (a new process with numba's cache filled) and installed size.

    python jobs/bench/bench_kernel_choice.py [--reps 20]
"""
import harness  # noqa: F401  (first: one thread per process)

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from mpigrad.kernels.numpy import activations, elementwise  # noqa: E402

SHAPE = (16, 64, 512)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def numpy_composition(x, g):
    y = 0.5 * x * (1 + elementwise.erf(x * np.float32(math.sqrt(0.5))))
    cdf = 0.5 * (1 + elementwise.erf(x * np.float32(math.sqrt(0.5))))
    dx = g * (cdf + x * np.exp(-0.5 * x * x) * np.float32(1 / math.sqrt(2 * math.pi)))
    return y, dx


def scipy_erf(x, g):
    from scipy.special import erf  # optional here: the benchmark compares it
    cdf = 0.5 * (1 + erf(x * np.float32(math.sqrt(0.5))))
    y = x * cdf
    dx = g * (cdf + x * np.exp(-0.5 * x * x) * np.float32(1 / math.sqrt(2 * math.pi)))
    return y, dx


def numexpr_tanh(x, g):
    import numexpr  # optional here: the benchmark compares it
    k = np.float32(math.sqrt(2 / math.pi))
    t = numexpr.evaluate("tanh(k * (x + 0.044715 * x * x * x))")
    y = numexpr.evaluate("0.5 * x * (1 + t)")
    dx = numexpr.evaluate("g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k"
                          " * (1 + 0.134145 * x * x))")
    return y, dx


def numba_fused(x, g):
    return activations.gelu(x, "none"), activations.gelu_backward((True,), g, None, x, "none")[0]


WAYS = {"numpy composition": numpy_composition, "scipy.special.erf": scipy_erf,
        "numexpr (tanh GELU; no erf)": numexpr_tanh, "numba (mpigrad)": numba_fused}
PACKAGES = {"numpy composition": [], "scipy.special.erf": ["scipy"],
            "numexpr (tanh GELU; no erf)": ["numexpr"], "numba (mpigrad)": ["numba", "llvmlite"]}
# What a new process pays before its first result (imports, compilation or the cache).
FIRST_CALL = """
import time; start = time.perf_counter()
import numpy as np, sys
sys.path.insert(0, {bench!r})
import bench_kernel_choice as b
x = np.ones({shape}, np.float32)
b.WAYS[{name!r}](x, x)
print(time.perf_counter() - start)
"""


def installed_mib(packages):
    total = 0
    for package in packages:
        files = importlib.metadata.distribution(package).files or []
        total += sum(f.locate().stat().st_size for f in files if f.locate().is_file())
    return total / 2 ** 20


def first_call_seconds(name, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    program = FIRST_CALL.format(bench=str(ROOT / "jobs" / "bench"), shape=SHAPE, name=name)
    out = subprocess.run([sys.executable, "-c", program], env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    return float(out.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    g = rng.standard_normal(SHAPE).astype(np.float32)
    reference = numba_fused(x.astype(np.float64), g.astype(np.float64))
    print(f"{'way':30s} {'fwd+bwd ms':>10s} {'max err':>9s} {'cold s':>7s} {'warm s':>7s} "
          f"{'MiB':>6s}")
    for name, way in WAYS.items():
        try:
            way(x, g)
        except ImportError as error:
            print(f"{name:30s} not installed ({error})")
            continue
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            y, dx = way(x, g)
            times.append(time.perf_counter() - start)
        error = max(np.abs(y - reference[0]).max(), np.abs(dx - reference[1]).max())
        with tempfile.TemporaryDirectory() as cache:
            cold = first_call_seconds(name, cache)
            warm = first_call_seconds(name, cache)
        print(f"{name:30s} {statistics.median(times) * 1e3:10.2f} {error:9.1e} {cold:7.2f} "
              f"{warm:7.2f} {installed_mib(PACKAGES[name]):6.1f}")


if __name__ == "__main__":
    main()
