"""What the fused kernels cost a new process: every kernel's first call (imports numba, then
compiles each loop, or loads it from numba's on-disk cache), in two new processes sharing a
fresh cache: the first compiles (cold), the second loads (warm).

    python jobs/bench/bench_kernel_startup.py
"""
import argparse
import os
import subprocess
import sys
import tempfile

PROGRAM = """
import time
start = time.perf_counter()
import mpigrad as mg
F = mg.nn.functional
imported = time.perf_counter()
x = mg.randn(4, 8, requires_grad=True)
w, b = mg.ones(8, requires_grad=True), mg.zeros(8, requires_grad=True)
y = F.layer_norm(x, (8,), w, b)
y = F.gelu(y) + F.gelu(y, approximate="tanh") + F.silu(y) + F.rms_norm(y, (8,), w)
y = F.dropout(F.batch_norm(y.reshape(4, 8, 1), None, None, w, b, training=True), 0.1)
y = y.reshape(4, 8)
loss = F.cross_entropy(y, mg.tensor([1, 2, 3, 0]))
loss = loss + F.softmax(y, 1).sum() + F.log_softmax(y, 1).sum()
loss.backward()
mg.nn.utils.clip_grad_norm_([w, b], 1.0)
for optimizer in (mg.optim.AdamW([w, b]), mg.optim.SGD([w, b], lr=0.1, momentum=0.9)):
    optimizer.step()
print(imported - start, time.perf_counter() - imported)
"""


def main():
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for run in ("cold", "warm"):
            out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True,
                                 capture_output=True, text=True, timeout=1200).stdout.split()
            print(f"{run}: import mpigrad {float(out[0]):.2f} s, first call of every fused "
                  f"kernel {float(out[1]):.2f} s")


if __name__ == "__main__":
    main()
