"""mpigrad tells numpy's OpenBLAS, before it loads, to let its idle threads sleep soon
(mpigrad/_blas_wait.py)."""
import json
import os
import subprocess
import sys

import pytest

from mpigrad import _blas_wait

# A threaded product, then the process's CPU over a sleep: OpenBLAS's default leaves its
# worker spinning for about a tenth of a second of it.
PROGRAM = """
import json, os, sys, time
{first}
import numpy as np
import mpigrad
from mpigrad import _blas_wait
mpigrad.set_num_threads(2)
a = np.ones((512, 512), np.float32)
a @ a
start = time.process_time()
time.sleep(0.3)
print(json.dumps([_blas_wait.state, os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
                  time.process_time() - start]))
"""


def _run(first="import mpigrad", **variables):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_THREAD_TIMEOUT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                        "MKL_NUM_THREADS") and not k.startswith(("PMI_", "OMPI_", "MPI_LOCAL"))}
    env.update(variables)
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(first=first)], env=env,
                          timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _openblas():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy  # noqa: F401
    apis = {info["internal_api"] for info in threadpoolctl.threadpool_info()}
    if "openblas" not in apis:
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: OpenBLAS starts no worker to wait")


def test_imported_before_numpy_its_idle_blas_threads_sleep():
    _openblas()
    state, value, cpu = _run()
    assert (state, value) == ("set", str(_blas_wait.WAIT_CYCLES_LOG2))
    # the main thread sleeps too: only a spinning worker would spend CPU here
    assert cpu < 0.05


def test_the_users_value_wins_and_after_numpy_nothing_is_set():
    assert _run(OPENBLAS_THREAD_TIMEOUT="30")[:2] == ["user's", "30"]
    assert _run(first="import numpy")[:2] == ["numpy first", None]
