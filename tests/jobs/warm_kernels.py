"""Compile the numba loops the jobs under test use, once, before the tests launch them.

On a fresh clone every compiled loop is built on first use and then saved to numba's on-disk
cache, but only for processes that start after that. The ranks of a job start together, so
each of them compiles the same loops at the same time: a 2-rank GPT job spent 14 s of CPU
per rank compiling on a cold cache. Here one process per job kind runs a tiny version of the
job (one rank, a step or two, the dtypes and layers the tests use) and the ranks launched
later only load what it saved.

`ensure_warm()` makes each run at most once per cache and per version of the kernels and
jobs: a marker file beside numba's cache records it, and a lock per run lets concurrent
pytest-xdist workers share the runs instead of compiling the same loops side by side. When
the markers exist it costs a stat per run. The jobs run correctly without it, only slower.
"""
import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from mpigrad.kernels.compiled import _cache

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "jobs"

# One short run in one process per kind of job the tests launch, with the options that pick
# its loops (dtype, model, layers); sizes and steps as small as the job allows.
_GPT = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
        "--batch-size", "2", "--steps", "2", "--warmup", "1", "--eval-interval", "2",
        "--eval-batches", "1", "--sample-chars", "2", "--max-chars", "4000"]
_LM = ["--max-words", "2000", "--vocab", "50", "--emsize", "8", "--nhid", "8", "--bptt", "5",
       "--batch-size", "2", "--epochs", "1"]
RUNS = (
    ["train.py", "--train-samples", "128", "--epochs", "1"],
    ["train.py", "--model", "cnn", "--train-samples", "128", "--epochs", "1"],
    ["train.py", "--model", "resnet", "--sync-bn", "--train-samples", "128", "--epochs", "1"],
    ["train_gpt.py", *_GPT],
    ["train_gpt.py", *_GPT, "--dtype", "float64", "--grad-accum", "2"],
    ["train_lm.py", *_LM],
    ["train_lm.py", *_LM, "--model", "GRU"],
    ["train_lm.py", *_LM, "--dropout", "0", "--dtype", "float64", "--tied"],
    ["train_lm.py", *_LM, "--model", "GRU", "--dropout", "0", "--dtype", "float64"],
)


def _cache_directory():
    """Where numba keeps the compiled loops of mpigrad/kernels/compiled (see its _cache.py)."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    return Path(configured) if configured else Path(_cache.__file__).parent / "__pycache__"


def _sources():
    """A hash of the kernels (their own stamp), the jobs' sources and this checkout's path
    (numba's cache keeps each path's loops apart): a change to any of them may change the
    loops a job compiles."""
    digest = hashlib.sha256(_cache.package_stamp().encode() + str(REPO).encode())
    for path in sorted(JOBS.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest


def _marker(directory, sources, run):
    """The file saying `run` has warmed this cache for these `sources`."""
    digest = sources.copy()
    digest.update(repr(run).encode())
    return directory / f"jobs-warm-{digest.hexdigest()[:20]}"


def _warm(run, environment):
    command = [sys.executable, str(JOBS / run[0]), *run[1:]]
    done = subprocess.run(command, cwd=REPO, env=environment, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"warming the jobs' kernels: {' '.join(command)} exited "
                           f"{done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def ensure_warm(environment):
    """Make each of RUNS (in `environment`, which must not carry a launcher's variables)
    unless its marker says it ran for these sources; returns whether any ran. A run that
    fails is an error naming it: the runs must keep up with the jobs' options, or they would
    quietly warm nothing.

    Each run has its own lock: a run another pytest-xdist worker is making is left to it
    while this one makes the others (both cores compile), and waited for at the end."""
    directory = _cache_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False  # no writable cache: numba compiles in every process anyway
    sources, warmed, pending, wait = _sources(), False, list(RUNS), False
    while pending:
        busy = []
        for run in pending:
            marker = _marker(directory, sources, run)
            if marker.exists():
                continue
            with open(f"{marker}.lock", "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    busy.append(run)
                    continue
                if not marker.exists():  # not made while we waited
                    _warm(run, environment)
                    marker.touch()
                    warmed = True
        pending, wait = busy, True
    return warmed
