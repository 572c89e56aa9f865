"""What the fused kernels cost a new process: every kernel's first call (imports numba, then
compiles each loop, or loads it from numba's on-disk cache), in new processes sharing a
fresh cache: the first compiles (cold), the second loads (warm). With --threads 2 the inputs
are large enough for the threaded twins (kernels/compiled/_threads.py), which compile (or
load) on top of the serial ones.

Each line gives wall time and the process's CPU time: on a busy machine the wall time
grows with the load while the CPU time stays near what a quiet machine's wall time is.

    python jobs/bench/bench_kernel_startup.py [--threads 1 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile

PROGRAM = """
import sys
import time
wall, cpu = time.perf_counter(), time.process_time()
import mpigrad as mg
F = mg.nn.functional
mg.set_num_threads({threads})
imported = time.perf_counter(), time.process_time()
x = mg.randn(256, 512, requires_grad=True)  # 131072 elements: four grains of work
w, b = mg.ones(512, requires_grad=True), mg.zeros(512, requires_grad=True)
y = F.layer_norm(x, (512,), w, b)
y = F.gelu(y) + F.gelu(y, approximate="tanh") + F.silu(y) + F.rms_norm(y, (512,), w)
y = F.dropout(F.batch_norm(y.reshape(256, 512, 1), None, None, w, b, training=True), 0.1)
y = y.reshape(256, 512)
loss = F.cross_entropy(y, mg.randint(0, 512, (256,)))
loss = loss + F.softmax(y, 1).sum() + F.log_softmax(y, 1).sum()
loss.backward()
mg.nn.utils.clip_grad_norm_([w, b], 1.0)
for optimizer in (mg.optim.AdamW([w, b]), mg.optim.SGD([w, b], lr=0.1, momentum=0.9)):
    optimizer.step()
print(imported[0] - wall, imported[1] - cpu, time.perf_counter() - imported[0],
      time.process_time() - imported[1])
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts to start with, each in its own fresh cache")
    args = parser.parse_args()
    for threads in args.threads:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            for run in ("cold", "warm"):
                out = subprocess.run([sys.executable, "-c", PROGRAM.format(threads=threads)],
                                     env=env, check=True, capture_output=True, text=True,
                                     timeout=1800).stdout.split()
                import_wall, import_cpu, first_wall, first_cpu = map(float, out)
                print(f"{threads} thread(s), {run}: import mpigrad {import_wall:.2f} s "
                      f"(cpu {import_cpu:.2f} s), first call of every fused kernel "
                      f"{first_wall:.2f} s (cpu {first_cpu:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
