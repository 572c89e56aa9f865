"""numba's on-disk cache for the loops here, keyed by every source file of this package.

numba checks a cached loop against the file that defines it only, so a loop in
activations.py that inlines `_math.exp` would keep loading the old exp after `_math.py`
changed. Each loop's locator here is numba's own (NUMBA_CACHE_DIR, then the package's
`__pycache__`, then the user's cache directory) with a hash of this whole package's files
as its stamp: changing any of them invalidates every loop's cache, and nothing else does
(a touched file, or a fresh clone of the same code at the same path with NUMBA_CACHE_DIR
kept from before, still loads).

`share` makes a loop's dispatcher use that cache well:

- loads skip numba's tables: numba fills its tables of implementations (0.15-0.35 s of a warm
  process's kernel start-up, measured) before every cache load, but only a compile reads them;
  a load needs numba's runtime alone. They are filled when a load misses, just before the
  compile that follows, and without importing scipy.linalg (`_fill_numba_tables`);
- compiles take turns: the processes sharing a cache directory compile each loop one at a
  time, and the others then load it. The ranks of a job started on a cold cache (`mpiexec -n
  8` after an install) would otherwise each compile every loop, eight times the CPU for the
  same result, and on a host with fewer cores than ranks eight times the wall time too.
"""
import contextlib
import fcntl
import hashlib
import importlib.util
import os
import sys
import threading
import time
import zlib

from numba.core import caching
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

_HERE = os.path.dirname(os.path.abspath(__file__))
_CACHE_IMPLEMENTATION = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # < 0.65


def package_stamp(directory=_HERE):
    """A hash of the contents of every .py file in `directory`."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py"):
            with open(os.path.join(directory, name), "rb") as source:
                digest.update(name.encode() + b"\0" + source.read() + b"\0")
    return digest.hexdigest()


class PackageLocator:
    """numba's locator for a loop of this package, with the package's stamp added."""
    stamp = None

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get_source_stamp(self):
        # the package's contents only, not numba's stamp of the one file (its modification
        # time before numba 0.6x): a fresh clone or a touched file keeps the cache
        return PackageLocator.stamp

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) != _HERE:
            return None
        if cls.stamp is None:
            cls.stamp = package_stamp()
        for numbas in _CACHE_IMPLEMENTATION._locator_classes:
            if numbas is not cls:
                inner = numbas.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


if PackageLocator not in _CACHE_IMPLEMENTATION._locator_classes:
    _CACHE_IMPLEMENTATION._locator_classes.insert(0, PackageLocator)


# How long a process waits for another one's compile of the same loop before compiling it
# itself: the slowest loop takes about 10 s on a loaded machine; a holder stopped in a
# debugger must not stop every other rank for good.
WAIT_SECONDS = 300.0
_POLL_SECONDS = 0.01
_lock_files = {}  # cache directory -> the descriptor of its lock file, open for good
_lock_files_guard = threading.Lock()


def _lock_file(directory):
    """The process's descriptor of `directory`'s lock file, or None where it cannot be made.
    It is never closed: closing any descriptor of a file drops every POSIX lock the process
    holds on it."""
    with _lock_files_guard:
        if directory not in _lock_files:
            try:
                os.makedirs(directory, exist_ok=True)
                _lock_files[directory] = os.open(os.path.join(directory, "compiling.lock"),
                                                 os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                _lock_files[directory] = None
        return _lock_files[directory]


def _lock_byte(descriptor, offset):
    """Lock one byte of the lock file, waiting up to WAIT_SECONDS; whether it was locked."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            return True
        except (BlockingIOError, PermissionError):  # another process holds it
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_SECONDS)
        except OSError:  # no locks on this file system (ENOLCK)
            return False


@contextlib.contextmanager
def turn_to_compile(dispatcher, signature):
    """Hold `dispatcher`'s lock for `signature` (one byte of `compiling.lock` in its cache
    directory) for the body; yields whether it is held: not when the loop is not cached, the
    file system has no locks, or another process kept it WAIT_SECONDS."""
    directory = getattr(dispatcher._cache, "_cache_path", None)
    descriptor = None if directory is None else _lock_file(directory)
    name = dispatcher._cache._cache_file._index_name if descriptor is not None else ""
    offset = zlib.crc32(f"{name} {signature}".encode()) & 0x7FFFFFFF
    held = descriptor is not None and _lock_byte(descriptor, offset)
    try:
        yield held
    finally:
        if held:
            fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, offset)


_SCIPY_BLAS = "scipy.linalg.cython_blas"


def _fill_numba_tables():
    """Fill numba's tables of implementations, as its compile would, but without importing
    scipy.linalg: numba.np.arraymath imports it only to learn whether np.convolve/np.correlate
    may call BLAS, which no loop here does, and it was 0.4-0.8 s of a start (scipy.linalg
    pulls in numpy.f2py). The answer is put back to what the import would have said (scipy is
    there), and numba imports scipy.linalg itself when a function that uses BLAS is
    compiled."""
    if (_SCIPY_BLAS in sys.modules or "numba.np.arraymath" in sys.modules
            or importlib.util.find_spec("scipy") is None):
        cpu_target.target_context.refresh()  # nothing to spare
        return
    sys.modules[_SCIPY_BLAS] = None  # its import fails at once
    try:
        cpu_target.target_context.refresh()
    finally:
        if sys.modules.get(_SCIPY_BLAS, 0) is None:
            del sys.modules[_SCIPY_BLAS]
    from numba.np import arraymath  # imported by the refresh above; not at the top (see there)
    arraymath._HAVE_BLAS = True


def share(dispatcher):
    """`dispatcher` (cached on disk) made to load without numba's tables and to compile each
    signature in its turn (`turn_to_compile`), shared by every process using its cache
    directory: one process compiles and saves it while the others wait, then load it (numba's
    `compile` looks in the cache first).

    The turns are fcntl's POSIX locks: the kernel drops them when a process dies, and they
    are taken per process, so a compile nested in another (a loop calling a loop) takes its
    own byte, and two threads of one process never wait on each other here (numba's own
    compiler lock orders them). A loop calls no loop that calls it back, so no two
    processes wait on each other's turns."""
    cache = dispatcher._cache
    if getattr(cache, "_cache_path", None) is None:  # not cached: nothing shared
        return dispatcher

    def load_overload(signature, target_context):
        rtsys.initialize(target_context)  # what loaded code calls into
        loaded = None
        with cache._guard_against_spurious_io_errors():
            loaded = cache._load_overload(signature, target_context)
        if loaded is None:
            _fill_numba_tables()  # numba compiles it next
        return loaded

    compile_here = dispatcher.compile

    def compile(signature):
        with turn_to_compile(dispatcher, signature):
            return compile_here(signature)

    cache.load_overload = load_overload
    dispatcher.compile = compile
    return dispatcher
