"""How many threads the compiled loops and numpy's BLAS use: torch's `set_num_threads` family.

No numba here: `import mpigrad` settles the default, and the compiled loops
(kernels/compiled/_threads.py) read `Settings.intra_op` on each call; numpy kernels made of
chunks (the convolutions) hand them to `run_chunks`, a small pool of Python threads. The
default:

- `OMP_NUM_THREADS` (`MKL_NUM_THREADS` over it, as torch reads them) when set;
- one thread when a launcher placed several ranks on this node and none is bound to cores
  of its own (torchrun sets `OMP_NUM_THREADS=1` for the same reason): N ranks with all the
  node's cores each would run N times more threads than there are cores;
- otherwise the cores this process may run on (its affinity mask, hyperthreads of a core
  counted once as torch does; a launcher that binds each rank to its cores gives each rank
  its own).

numpy's BLAS follows `set_num_threads`, except in `run_chunks`' regions and for small
products through `matmul` (one thread each); at import it is changed only when the default is not
what it picked by itself (no thread variable set; several ranks on the node, or
hyperthreads), through
threadpoolctl, which knows every BLAS numpy is built with (OpenBLAS, MKL, BLIS, Accelerate).
"""
import concurrent.futures
import contextlib
import itertools
import os
import threading

import numpy as np

from ..launchers import ranks_on_node

# Read by numpy's BLAS itself when it loads; any of them set means BLAS was told by the user.
_BLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                   "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def _allowed_cpus():
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # no affinity masks (macOS)
        return set(range(os.cpu_count() or 1))


def cpus(topology="/sys/devices/system/cpu"):
    """The cores this process may run on: CPUs of its affinity mask, hyperthreads of one
    core counted once, as torch counts cores for its default."""
    allowed = _allowed_cpus()
    cores = set()
    for cpu in allowed:
        try:
            with open(f"{topology}/cpu{cpu}/topology/thread_siblings_list") as siblings:
                cores.add(siblings.read().strip())
        except OSError:  # no sysfs topology: every CPU a core
            return len(allowed)
    return len(cores)


def _from_variables(environ):
    threads = None
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        text = environ.get(name, "").strip()
        if not text:
            continue
        outermost = text.split(",")[0].strip()  # OpenMP's "4,2" gives each nesting level
        if not outermost.isdigit() or int(outermost) < 1:
            raise ValueError(f"{name}={environ[name]!r} is not a number of threads (a positive "
                             "integer); unset it or give one")
        threads = int(outermost)
    return threads


def default_threads(environ=os.environ):
    """The intra-op thread count a new process starts with (see the module's docstring)."""
    threads = _from_variables(environ)
    if threads is not None:
        return threads
    ranks = ranks_on_node(environ)
    if ranks is not None and ranks > 1 and len(_allowed_cpus()) >= (os.cpu_count() or 1):
        return 1
    return cpus()


class Settings:
    """The process's counts; the compiled loops read `Settings.intra_op` on every call."""
    intra_op = default_threads()
    interop = cpus()
    interop_fixed = False  # torch allows one set_num_interop_threads per process
    blas = None  # the count last given to BLAS; None: BLAS's own choice at load


_blas_controller = None


def _blas_libraries():
    global _blas_controller
    if _blas_controller is None:
        # Here, not at the top: finding the loaded BLAS libraries takes 10-20 ms, paid only
        # when a count has to change or a pooled region first runs.
        import threadpoolctl
        import numpy  # noqa: F401  (its BLAS must be loaded to be found)
        _blas_controller = threadpoolctl.ThreadpoolController()
    return [lib for lib in _blas_controller.lib_controllers if lib.user_api == "blas"]


def _set_blas_threads(threads):
    global _blas_controller
    if Settings.blas == threads:
        return
    # Look for the loaded libraries again (under 1 ms once threadpoolctl is imported): a BLAS
    # loaded since the last look (scipy's own OpenBLAS) follows the count too.
    _blas_controller = None
    _blas_libraries()
    _blas_controller.limit(limits=threads, user_api="blas")
    Settings.blas = threads


def follow_new_blas():
    """Look for BLAS libraries again after one was loaded (scipy's, which numba's np.dot
    calls), so that the count last given to set_num_threads applies to it too."""
    global _blas_controller
    _blas_controller = None
    if Settings.blas is not None:
        threads, Settings.blas = Settings.blas, None
        _set_blas_threads(threads)


def _positive(name, threads):
    if isinstance(threads, bool) or not hasattr(type(threads), "__index__"):
        raise RuntimeError(f"{name} expects an int, but got {type(threads).__name__}")
    threads = int(threads)
    if threads < 1:
        raise RuntimeError(f"{name} expects a positive integer")
    return threads


def set_num_threads(threads):
    """torch.set_num_threads: the threads of the compiled loops, of numpy's BLAS and of the
    chunked numpy kernels (run_chunks) from now on, in every thread of this process. The
    loops use at most numba's pool (`NUMBA_NUM_THREADS`, the machine's CPUs by default); BLAS
    and run_chunks take the number given."""
    threads = _positive("set_num_threads", threads)
    _set_blas_threads(threads)
    Settings.intra_op = threads


def get_num_threads():
    """torch.get_num_threads."""
    return Settings.intra_op


def set_num_interop_threads(threads):
    """torch.set_num_interop_threads: once per process. Recorded for scripts that set it;
    mpigrad runs each op on the calling thread and keeps no inter-op pool, so it changes no
    computation."""
    threads = _positive("set_num_interop_threads", threads)
    if Settings.interop_fixed:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work "
                           "has started or set_num_interop_threads called")
    Settings.interop, Settings.interop_fixed = threads, True


def get_num_interop_threads():
    """torch.get_num_interop_threads: the cores this process may run on, unless set."""
    return Settings.interop


# BLAS started with one thread per CPU of the mask unless told otherwise
if (Settings.intra_op != len(_allowed_cpus())
        and not any(os.environ.get(name, "").strip() for name in _BLAS_VARIABLES)):
    _set_blas_threads(Settings.intra_op)


# ----------------------------------------------------------------------------- chunk pool
class _ChunkPool:
    """The Python threads that numpy kernels hand chunks to (see run_chunks)."""
    lock = threading.Lock()  # one pooled region at a time per process
    executor = None
    workers = 0


def _reset_chunk_pool_after_fork():
    # The parent's pool threads do not exist in the child, and a parent thread may have held
    # the lock at the fork.
    _ChunkPool.lock, _ChunkPool.executor, _ChunkPool.workers = threading.Lock(), None, 0


os.register_at_fork(after_in_child=_reset_chunk_pool_after_fork)


def run_chunks(work, count):
    """[work(k) for k in range(count)], the calls spread over up to `set_num_threads`
    threads (the caller's and a pool's), each of whose BLAS calls runs on one thread.

    For kernels made of numpy passes and BLAS calls over chunks of a batch: OpenBLAS runs a
    small GEMM on one thread whatever it is allowed, and numpy's passes always do, but both
    release the GIL, so whole chunks on several threads do scale. `work(k)` must depend on k
    only (never on which thread runs it or how many there are) and write nothing another
    chunk writes; then the results are the same bits on any number of threads. Work arrays
    a chunk keeps per thread (threading.local) are its own. A call that finds another
    thread's region running runs its chunks on its own thread rather than waiting."""
    threads = min(Settings.intra_op, count)
    if threads < 2 or not _ChunkPool.lock.acquire(blocking=False):
        return [work(k) for k in range(count)]
    try:
        if _ChunkPool.workers < threads - 1:
            if _ChunkPool.executor is not None:
                _ChunkPool.executor.shutdown(wait=False)
            _ChunkPool.executor = concurrent.futures.ThreadPoolExecutor(
                threads - 1, thread_name_prefix="mpigrad-chunks")
            _ChunkPool.workers = threads - 1
        results = [None] * count
        claims = itertools.count()  # next() on it is atomic under the GIL
        failed = []  # once a chunk raised, the other threads take no new chunk

        def drain():
            for k in iter(claims.__next__, None):
                if k >= count or failed:
                    return
                try:
                    results[k] = work(k)
                except BaseException:
                    failed.append(k)
                    raise

        with _blas_on_one_thread():
            helpers = [_ChunkPool.executor.submit(drain) for _ in range(threads - 1)]
            try:
                drain()
            finally:
                # Every chunk is finished (or failed) before its arrays are handed back;
                # a helper's error is raised here.
                for helper in helpers:
                    helper.result()
        return results
    finally:
        _ChunkPool.lock.release()


@contextlib.contextmanager
def _blas_on_one_thread():
    """BLAS on one thread inside, its count before restored after; the caller holds
    _ChunkPool.lock (BLAS's count is the process's: only the lock's holder changes it)."""
    libraries = _blas_libraries()
    counts = [lib.get_num_threads() for lib in libraries]
    for lib in libraries:
        lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, count in zip(libraries, counts):
            lib.set_num_threads(count)


# The fewest multiply-adds (M N K) for which a product outside run_chunks runs on all of
# BLAS's threads. OpenBLAS threads products from 262144 (4 x 65536), and each threaded call
# leaves its workers spinning for their next job (a tenth of a second), on the cores that
# run_chunks' helpers and the compiled loops' threads want: the tutorial CNN at 2 threads,
# whose only threaded products are its 64 x 320 x 50 linear layer's, spent 5-26 ms of a
# worker's CPU per step spinning and its main thread 11-22 ms against 6-7 ms with that
# layer on one thread (loaded machine). Measured alone (CPU time, 2 threads against 1):
# 1M multiply-adds 3x slower, 3.2M even, 33M 1.1x faster.
_THREADED_PRODUCT_FROM = 1 << 23


@contextlib.contextmanager
def blas_on_one_thread():
    """BLAS on one thread inside (nothing to change under set_num_threads(1), nor while
    another thread's region holds it there already)."""
    if Settings.intra_op < 2 or not _ChunkPool.lock.acquire(blocking=False):
        yield
        return
    try:
        with _blas_on_one_thread():
            yield
    finally:
        _ChunkPool.lock.release()


def product_thread_count(rows, inner, columns):
    """How many threads a (rows, inner) by (inner, columns) product outside run_chunks runs
    on: one for a small product (_THREADED_PRODUCT_FROM), else set_num_threads'."""
    return Settings.intra_op if rows * inner * columns >= _THREADED_PRODUCT_FROM else 1


def product_threads(rows, inner, columns):
    """numpy's BLAS held at `product_thread_count` threads for the block."""
    if product_thread_count(rows, inner, columns) == Settings.intra_op:
        return contextlib.nullcontext()
    return blas_on_one_thread()


def matmul(a, b, out=None):
    """np.matmul(a, b, out), under product_threads when a and b are matrices; with
    set_num_threads(1) it is np.matmul."""
    if a.ndim != 2 or b.ndim != 2:
        return np.matmul(a, b, out=out)
    with product_threads(a.shape[0], a.shape[1], b.shape[1]):
        return np.matmul(a, b, out=out)
