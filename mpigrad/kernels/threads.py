"""How many threads the compiled loops and numpy's BLAS use: torch's `set_num_threads` family.

Numbers only, and no numba: `import mpigrad` settles the default here, and the compiled
loops (kernels/compiled/_threads.py) read `Settings.intra_op` on each call. The default:

- `OMP_NUM_THREADS` (`MKL_NUM_THREADS` over it, as torch reads them) when set;
- one thread when a launcher placed several ranks on this node and none is bound to cores
  of its own (torchrun sets `OMP_NUM_THREADS=1` for the same reason): N ranks with all the
  node's cores each would run N times more threads than there are cores;
- otherwise the cores this process may run on (its affinity mask, hyperthreads of a core
  counted once as torch does; a launcher that binds each rank to its cores gives each rank
  its own).

numpy's BLAS follows `set_num_threads`; at import it is changed only when the default is not
what it picked by itself (no thread variable set; several ranks on the node, or
hyperthreads), through
threadpoolctl, which knows every BLAS numpy is built with (OpenBLAS, MKL, BLIS, Accelerate).
"""
import os

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


def _set_blas_threads(threads):
    global _blas_controller
    if Settings.blas == threads:
        return
    if _blas_controller is None:
        # Here, not at the top: finding the loaded BLAS libraries takes 10-20 ms, paid only
        # when a count has to change.
        import threadpoolctl
        import numpy  # noqa: F401  (its BLAS must be loaded to be found)
        _blas_controller = threadpoolctl.ThreadpoolController()
    _blas_controller.limit(limits=threads, user_api="blas")
    Settings.blas = threads


def _positive(name, threads):
    if isinstance(threads, bool) or not hasattr(type(threads), "__index__"):
        raise RuntimeError(f"{name} expects an int, but got {type(threads).__name__}")
    threads = int(threads)
    if threads < 1:
        raise RuntimeError(f"{name} expects a positive integer")
    return threads


def set_num_threads(threads):
    """torch.set_num_threads: the threads of the compiled loops and of numpy's BLAS from now
    on, in every thread of this process. The loops use at most numba's pool
    (`NUMBA_NUM_THREADS`, the machine's CPUs by default); BLAS takes the number given."""
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
