"""oneDNN, the library under torch's CPU convolutions, called through its C API (ctypes).

It comes from the `onednn-cpu-gomp` wheel (oneDNN 3.2 on GNU OpenMP; a dependency on x86-64
Linux, see setup.cfg) and is loaded on first use, never at import. Its direct convolutions
on blocked layouts run the ResNet's 3x3 layers about twice as fast as the numpy kernels'
im2col, Winograd and direct loops (conv.py), its matmul primitive and sgemm run linear's
products at about torch's MKL's speed where OpenBLAS takes 1.1-1.3x (matmul.py, `gemm`), and
its LSTM primitive runs a whole LSTM layer, forward and backward, in 0.75 of the time of
linear and mpigrad's compiled recurrence (rnn.py; docs/benchmarks.md, "oneDNN in the
engine").

`library()` is the loaded library, or None where it cannot be had: another platform, the
wheel missing, the system's libgomp.so.1 missing (the wheel links it and does not bundle
it), `MPIGRAD_ONEDNN=0`, or `mpigrad.backends.mkldnn.enabled` set False. The numpy kernels
then compute everything themselves; `unavailable_reason()` says why.

Threads: every call runs on `set_num_threads` OpenMP threads (libgomp's count, set before
each call); a primitive is built for the count it runs with, as oneDNN requires. In a
child forked after oneDNN ran, it runs on one thread: GNU OpenMP's pool does not survive a
fork, and a region of one thread never touches it.
"""
import ctypes
import importlib.metadata
import os
import threading

import numpy as np

from ..threads import get_num_threads, product_thread_count

# dnnl_types.h / dnnl_common_types.h of oneDNN 3.2
F32 = 3
PLAIN_1D, PLAIN_4D, ANY_LAYOUT = 2, 5, 1  # dnnl_a, dnnl_abcd, dnnl_format_tag_any
CPU_ENGINE, IN_ORDER = 1, 1
FORWARD_TRAINING, FORWARD_INFERENCE = 64, 96  # dnnl_prop_kind_t
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 17, 33, 41
ARG_DIFF_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS = 129, 145, 161
QUERY_EXEC_ARG_MD = 255  # dnnl_query_exec_arg_md: the layout of any argument, by its number
INVALID_ARGUMENTS, UNIMPLEMENTED = 2, 3
STATUS = {1: "out of memory", INVALID_ARGUMENTS: "invalid arguments",
          UNIMPLEMENTED: "unimplemented", 5: "runtime error", 6: "not required"}

Pointer, Dims = ctypes.c_void_p, ctypes.c_int64 * 12


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", Pointer)]


class OneDNNError(RuntimeError):
    """A call into oneDNN that did not succeed; `status` is its dnnl_status_t."""

    def __init__(self, name, status):
        super().__init__(f"oneDNN: {name} returned {STATUS.get(status, status)} "
                         f"(dnnl_status {status})")
        self.status = status


class Library:
    """The loaded libdnnl: one CPU engine, an in-order stream per thread, and the calls the
    kernels make, each checked."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        # Already loaded with libdnnl (its dependency), so this is the same library instance.
        self.gomp = ctypes.CDLL("libgomp.so.1")
        self.lib.dnnl_primitive_desc_query_md.restype = Pointer
        self.lib.dnnl_primitive_desc_query_md.argtypes = [Pointer, ctypes.c_int, ctypes.c_int]
        self.lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        self.lib.dnnl_memory_desc_get_size.argtypes = [Pointer]
        self.lib.dnnl_memory_desc_equal.argtypes = [Pointer, Pointer]
        self.lib.dnnl_memory_set_data_handle.argtypes = [Pointer, Pointer]
        self.lib.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char] + [ctypes.c_int64] * 3 + [
            ctypes.c_float, Pointer, ctypes.c_int64, Pointer, ctypes.c_int64, ctypes.c_float,
            Pointer, ctypes.c_int64]
        self.engine = Pointer()
        self.call("dnnl_engine_create", ctypes.byref(self.engine), CPU_ENGINE, 0)
        self._streams = threading.local()

    @property
    def stream(self):
        """This thread's stream: oneDNN does not promise that several threads can execute on
        one stream at once, and RPC's threads run kernels beside the main thread's. A
        thread's stream lives as long as the process (a few hundred bytes each)."""
        stream = getattr(self._streams, "stream", None)
        if stream is None:
            stream = Pointer()
            self.call("dnnl_stream_create", ctypes.byref(stream), self.engine, IN_ORDER)
            self._streams.stream = stream
        return stream

    def call(self, name, *args):
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise OneDNNError(name, status)

    def threads(self, wanted=None):
        """Sets the OpenMP thread count of this thread's next calls: `wanted`, by default
        `set_num_threads`'. Returns it."""
        threads = 1 if _State.forked else (wanted or get_num_threads())
        self.gomp.omp_set_num_threads(threads)
        return threads

    def desc(self, shape, layout, dtype=F32):
        made = Pointer()
        self.call("dnnl_memory_desc_create_with_tag", ctypes.byref(made), len(shape),
                  Dims(*shape), dtype, layout)
        return made

    def strided_desc(self, shape, strides, dtype=F32):
        """A plain layout with the given strides (in elements): a transposed view's."""
        made = Pointer()
        self.call("dnnl_memory_desc_create_with_strides", ctypes.byref(made), len(shape),
                  Dims(*shape), dtype, Dims(*strides))
        return made

    def chosen_desc(self, primitive_desc, arg):
        """The layout the primitive chose for `arg` (owned by the primitive descriptor)."""
        return Pointer(self.lib.dnnl_primitive_desc_query_md(primitive_desc, QUERY_EXEC_ARG_MD,
                                                             arg))

    def same_layout(self, a, b):
        return bool(self.lib.dnnl_memory_desc_equal(a, b))

    def bytes(self, desc):
        return self.lib.dnnl_memory_desc_get_size(desc)

    def memory(self, desc):
        """A memory object of `desc` with no buffer: each call hands it one (`bind`)."""
        made = Pointer()
        self.call("dnnl_memory_create", ctypes.byref(made), desc, self.engine, None)
        return made

    def bind(self, memory, address):
        self.call("dnnl_memory_set_data_handle", memory, Pointer(address))

    def primitive(self, primitive_desc):
        made = Pointer()
        self.call("dnnl_primitive_create", ctypes.byref(made), primitive_desc)
        return made

    def reorder(self, source, target):
        made = Pointer()
        self.call("dnnl_reorder_primitive_desc_create", ctypes.byref(made), source,
                  self.engine, target, self.engine, None)
        try:
            return self.primitive(made)
        finally:
            self.call("dnnl_primitive_desc_destroy", made)

    def execute(self, primitive, args):
        packed = (ExecArg * len(args))(*[ExecArg(arg, memory) for arg, memory in args.items()])
        self.call("dnnl_primitive_execute", primitive, self.stream, len(args), packed)

    def wait(self):
        self.call("dnnl_stream_wait", self.stream)

    def gemm(self, a, b, out):
        """out = a @ b for float32 matrices: out C-contiguous, a and b each C-contiguous or
        the transpose of a C-contiguous one (`gemm_takes`)."""
        (trans_a, lda), (trans_b, ldb) = _operand(a), _operand(b)
        (m, k), n = a.shape, out.shape[1]
        self.threads(product_thread_count(m, k, n))
        self.call("dnnl_sgemm", trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda,
                  b.ctypes.data, ldb, 0.0, out.ctypes.data, n)


def _operand(matrix):
    """(trans, leading dimension) of a row-major operand: "N" for a C-contiguous matrix,
    "T" for the transpose of one."""
    if matrix.flags.c_contiguous:
        return b"N", max(matrix.shape[1], 1)
    return b"T", max(matrix.shape[0], 1)


def gemm_takes(a, b):
    """Whether `Library.gemm` takes these operands."""
    return all(m.dtype == np.float32 and m.ndim == 2 and m.size > 0
               and (m.flags.c_contiguous or m.T.flags.c_contiguous) for m in (a, b))


class _State:
    lock = threading.Lock()
    loaded = None  # the Library, once loaded
    reason = None  # why there is none, once a load failed
    enabled = True  # mpigrad.backends.mkldnn.enabled
    forked = False


def _after_fork_in_child():
    _State.forked = _State.loaded is not None
    _State.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def library_path():
    """Where the onednn-cpu-gomp wheel put libdnnl.so.3 (outside site-packages: under the
    environment's lib/)."""
    try:
        distribution = importlib.metadata.distribution("onednn-cpu-gomp")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in distribution.files or ():
        if file.name == "libdnnl.so.3":
            return distribution.locate_file(file)
    return None


def _load():
    setting = os.environ.get("MPIGRAD_ONEDNN", "1").strip()
    if setting not in ("0", "1"):
        raise ValueError(f"MPIGRAD_ONEDNN={os.environ['MPIGRAD_ONEDNN']!r}: give 1 (use oneDNN "
                         "where it is installed) or 0 (never)")
    if setting == "0":
        return None, "MPIGRAD_ONEDNN=0"
    path = library_path()
    if path is None:
        return None, ("the onednn-cpu-gomp wheel is not installed (it is a dependency on "
                      "x86-64 Linux only)")
    try:
        return Library(path), None
    except OSError as error:  # most often the system's libgomp.so.1 is missing
        return None, f"{path} did not load: {error}"


def _loaded():
    if _State.loaded is None and _State.reason is None:
        with _State.lock:
            if _State.loaded is None and _State.reason is None:
                _State.loaded, _State.reason = _load()
    return _State.loaded


def library():
    """The loaded oneDNN, or None: not loadable here (`unavailable_reason`), or disabled
    (`mpigrad.backends.mkldnn.enabled`)."""
    return _loaded() if _State.enabled else None


def unavailable_reason():
    """Why oneDNN cannot be loaded here, or None when it can (enabled or not)."""
    _loaded()
    return _State.reason


def set_enabled(enabled):
    _State.enabled = bool(enabled)


def is_enabled():
    return _State.enabled
