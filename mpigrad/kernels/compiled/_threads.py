"""Loops that run on several threads, behind a guard that cannot crash or deadlock.

`@parallel(grain)` makes a loop written with `numba.prange` into a serial loop (prange is
range there) and a way to run it on threads, and each call picks one. The threaded way:

- `@parallel(rows=(names...))`, for a loop whose iterations each own a row (or an element)
  of the arrays named: threads run the serial loop's own compiled code, each on its range of
  those arrays' rows. One prange driver (`_on_rows`, compiled once: its arguments are
  integers) calls, for each part, a row-range function that a small serial compile per
  loop signature (`_launch`) defines beside the arguments it packs on the stack; that
  function calls the serial loop through its address. The per-signature compile takes
  about 0.1 s, against 0.3-0.5 s for a prange driver of each signature and 0.3-5 s for a
  second, threaded copy of the loop whose whole body LLVM would optimise and emit again
  (CI compiles every kernel's threaded form cold; a user who sets two threads, every one
  the model uses). An array named in `rows` whose first dimension is not the loop's (an
  empty optional buffer) is passed whole;
- without `rows`, for loops that threads cannot split by rows alone (a reduction over
  fixed-size blocks, channels of an (N, C, S) array, (batch, head) units, a random draw
  numbered by the element's index): a threaded twin compiled with `parallel=True`.

Each call picks:

- threaded only when `set_num_threads` (kernels/threads.py) allows more than one thread and
  there are at least two `grain`s of work (elements of the largest array, or what the
  loop's `work` says), with one thread per `grain` at most, since waking threads costs
  microseconds (more on workqueue: below);
- one threaded loop at a time per process: a call that finds another thread inside one (RPC
  and DDP threads run kernels too) runs the serial loop instead of waiting, so no call waits
  for another and no two parallel regions overlap.

The threading layer is numba's omp where oneDNN is loaded, so that the loops and oneDNN's
products share one team of GNU OpenMP threads (`_shares_onednn_team`); else numba's tbb when
the tbb wheel is installed (mpigrad asks for it where it has wheels: x86-64 Linux, macOS and
Windows), else its workqueue; NUMBA_THREADING_LAYER overrides all three. Between tbb and
workqueue a threaded call's fixed cost decides: a parallel region
that does nothing took 2 us on tbb and 84 us on workqueue (2 cores, idle), whose two rounds of
condition-variable wake-ups per region made a (1024, 128) LayerNorm 164 us on 2 threads
against 82 us on one, where tbb took 52 us. On workqueue a call therefore needs
`WORKQUEUE_GRAINS` times more work to be threaded. Both layers survive a fork (tbb stops and
restarts its threads around a fork by the thread that first started them); GNU OpenMP kills a
child that enters it after its parent did, and tbb's threads may be lost to a child forked
by another thread: such a child runs the serial loops. On GNU OpenMP only the main thread
opens regions (`_may_start_a_team`). workqueue aborts the process when
two threads enter it at once, which the one-at-a-time rule rules out.

Threaded runs compute the same thing element by element: rows or elements split among
threads are each computed as in the serial loop (split by rows, by the same machine code),
and reductions add fixed-size blocks (not one block per thread), so a result does not depend
on the number of threads, and is the same from run to run.
"""
import ctypes
import functools
import importlib.metadata
import os
import sys
import threading
import types

import numba
import numpy as np
from numba import prange
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from .. import onednn
from ..threads import Settings
from ._math import jit

_POOL = numba.config.NUMBA_NUM_THREADS  # numba's threads, fixed at its import
# What a call on workqueue must have, in grains, for each thread it gets (see above).
WORKQUEUE_GRAINS = 16
# numba's threading layer needs tbb's runtime interface from this version on.
_TBB_INTERFACE_FROM = 12060
_TBB_LIBRARY = {"linux": "libtbb.so.12", "darwin": "libtbb.12.dylib", "win32": "tbb12.dll"}


def _load_tbb():
    """Whether the tbb wheel's library is loaded, loading it: pip puts it in the
    environment's lib folder, where the dynamic loader does not look when numba asks for it
    by name; once loaded, that name finds it."""
    try:
        files = importlib.metadata.files("tbb") or ()
    except importlib.metadata.PackageNotFoundError:
        return False
    for file in files:
        if file.name == _TBB_LIBRARY.get(sys.platform):
            try:
                library = ctypes.CDLL(str(file.locate()), mode=ctypes.RTLD_GLOBAL)
                return library.TBB_runtime_interface_version() >= _TBB_INTERFACE_FROM
            except (OSError, AttributeError):  # not loadable here, or not the tbb we know
                return False
    return False


@functools.cache
def _layer():
    """numba's threading layer for the loops, chosen before the first threaded call, which
    starts it; not at import, since finding and loading tbb's library takes 15-30 ms that
    the one-thread ranks of a launched job would pay for nothing. `Parallel.threads_for`
    asks first, before a call compiles or runs anything parallel."""
    tbb = _load_tbb()  # also for a user's NUMBA_THREADING_LAYER that names or allows it
    if "NUMBA_THREADING_LAYER" in os.environ:
        return os.environ["NUMBA_THREADING_LAYER"]  # numba reads it itself
    if _shares_onednn_team():
        numba.config.THREADING_LAYER = "omp"
    else:
        numba.config.THREADING_LAYER = "tbb" if tbb else "workqueue"
    return numba.config.THREADING_LAYER


def _shares_onednn_team():
    """Whether the loops can run on oneDNN's GNU OpenMP threads: oneDNN loaded (with the
    system's libgomp) and numba's omp layer importable. Two pools of threads that each spin a
    while after their work for the next, on as many cores as either has threads, take those
    cores from each other: the GPT step at 2 threads took 63.5 ms with the loops on tbb and
    45.8 ms on oneDNN's own team (docs/benchmarks.md)."""
    if onednn.library() is None:
        return False
    try:
        import numba.np.ufunc.omppool  # noqa: F401  (links libgomp.so.1.0.0 by that name)
    except ImportError:
        return False
    return True


class _Region:
    lock = threading.Lock()
    starter = None  # the thread that ran this process's first threaded loop, numba's "main"
    serial_only = False  # forked when its threads could not follow
    forked_by_starter = True


def _before_fork():
    _Region.forked_by_starter = _Region.starter in (None, threading.get_ident())


def _after_fork_in_child():
    _Region.lock = threading.Lock()  # a parent thread may have held it at the fork
    if _Region.starter is not None:
        layer = numba.threading_layer()
        if layer == "omp" or (layer == "tbb" and not _Region.forked_by_starter):
            _Region.serial_only = True


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _twin(function):
    """A copy of `function` under another qualified name: numba's cache files are named by
    qualified name and its cache key omits `parallel=`, so the two must not share a name."""
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)
    copy.__qualname__ = function.__qualname__ + "_threaded"
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    return copy


def _rows_of(context, builder, array_type, array, wanted, rows, start, stop):
    """The view array[start:stop] when `wanted` (an i1) and its first dimension is `rows`,
    else the array itself, as the same numba type: a row range of a C-contiguous array is
    C-contiguous (Parallel._address keeps F-ordered matrices off this path)."""
    whole = context.make_array(array_type)(context, builder, array)
    shape = cgutils.unpack_tuple(builder, whole.shape, array_type.ndim)
    strides = cgutils.unpack_tuple(builder, whole.strides, array_type.ndim)
    cut = builder.and_(wanted, builder.icmp_signed("==", shape[0], rows))
    skipped = builder.mul(start, strides[0])
    view = context.make_array(array_type)(context, builder)
    populate_array(view,
                   data=builder.select(cut, cgutils.pointer_add(builder, whole.data, skipped),
                                       whole.data),
                   shape=cgutils.pack_array(
                       builder, [builder.select(cut, builder.sub(stop, start), shape[0])]
                       + shape[1:]),
                   strides=whole.strides, itemsize=whole.itemsize, meminfo=whole.meminfo,
                   parent=whole.parent)
    return view._getvalue()


def _row_range_function(context, module, args):
    """This module's function `void (i8* state, i64 start, i64 stop)` for `args`' types: it
    reads a packed state {loop address, split mask, row count, args} and calls the serial
    loop at that address (numba's calling convention, returning nothing) with `args`, each
    array whose bit is set in the mask cut to rows start:stop. The status the convention
    returns is not read: these loops raise nothing (error_model="numpy", and no raise in
    them)."""
    state_type = ir.LiteralStructType([_I64, _I64, _I64, context.get_value_type(args)])
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, _I64,
                                                                   _I64]),
                           name=module.get_unique_name("mpigrad_row_range"))
    function.linkage = "internal"
    builder = ir.IRBuilder(function.append_basic_block())
    state, first, last = function.args
    state = builder.load(builder.bitcast(state, state_type.as_pointer()))
    loop, mask, row_count, arguments = (builder.extract_value(state, i) for i in range(4))
    passed = []
    for position, argument_type in enumerate(args.types):
        value = builder.extract_value(arguments, position)
        if isinstance(argument_type, numba.types.Array):
            wanted = builder.trunc(builder.lshr(mask, mask.type(position)), cgutils.bool_t)
            value = _rows_of(context, builder, argument_type, value, wanted, row_count, first,
                             last)
        passed.append(value)
    argument_types = list(args.types)
    loop_type = context.call_conv.get_function_type(numba.types.none, argument_types)
    context.call_conv.call_function(builder, builder.inttoptr(loop, loop_type.as_pointer()),
                                    numba.types.none, argument_types, passed)
    builder.ret_void()
    return function, state_type


@intrinsic
def _run_on_parts(typingctx, driver, address, args, split, rows, parts):
    """Call the threaded driver at `driver` (_split_rows, compiled once for every loop) with
    this signature's row-range function and, on the stack, the state it reads."""
    def codegen(context, builder, signature, values):
        driver_address, loop, arguments, mask, row_count, part_count = values
        function, state_type = _row_range_function(context, builder.module, args)
        state = cgutils.alloca_once(builder, state_type)
        packed = ir.Constant(state_type, ir.Undefined)
        for position, value in enumerate((loop, mask, row_count, arguments)):
            packed = builder.insert_value(packed, value, position)
        builder.store(packed, state)
        integers = [numba.types.int64] * 4
        driver_type = context.call_conv.get_function_type(numba.types.none, integers)
        context.call_conv.call_function(
            builder, builder.inttoptr(driver_address, driver_type.as_pointer()),
            numba.types.none, integers,
            [builder.ptrtoint(function, _I64), builder.ptrtoint(state, _I64), row_count,
             part_count])
        return context.get_dummy_value()

    return numba.types.none(driver, address, args, split, rows, parts), codegen


@intrinsic
def _call_range(typingctx, function, state, start, stop):
    """Call the row-range function at `function` on rows start:stop."""
    def codegen(context, builder, signature, values):
        address, packed, first, last = values
        function_type = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, _I64, _I64])
        builder.call(builder.inttoptr(address, function_type.as_pointer()),
                     [builder.inttoptr(packed, cgutils.voidptr_t), first, last])
        return context.get_dummy_value()

    return numba.types.none(function, state, start, stop), codegen


def _split_rows(function, state, rows, parts):
    for part in prange(parts):
        _call_range(function, state, rows * part // parts, rows * (part + 1) // parts)


def _launch_on_rows(driver, address, args, split, rows, parts):
    _run_on_parts(driver, address, args, split, rows, parts)


_on_rows = jit(_split_rows, parallel=True)  # one compile: its arguments are all integers
_launch = jit(_launch_on_rows)  # one small serial compile per loop signature
_I64 = ir.IntType(64)


@functools.cache
def _driver_address():
    """The address of _split_rows' one compiled form (compiled or loaded on first use)."""
    signature = (numba.types.int64,) * 4
    _on_rows.compile(signature)
    compiled = _on_rows.overloads[signature]
    return compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name)


def _type_key(value):
    """What numba's typing of `value` depends on, cheaply (a dict key, not a numba type)."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        return (value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous,
                flags.writeable, flags.aligned)
    if type(value) is int:  # int64, or uint64 from 2 ** 63 on
        return int, value < 1 << 63
    return type(value)


def _may_start_a_team():
    """Whether this thread may open a parallel region: on GNU OpenMP only the main thread.
    libgomp keeps a team of threads per calling thread, and when that thread ends its team's
    threads leave through pthread_exit, whose unwinding holds libgcc's frame-table lock; a
    fork at that moment (a DataLoader's workers, right after a pool of Python threads
    joined) left the lock held in the child, which then hung in its first compiled loop
    (numba registers each loaded loop's frames under that lock)."""
    return _layer() != "omp" or threading.current_thread() is threading.main_thread()


class Parallel:
    """A loop's serial form (`serial`, a numba dispatcher), its threaded form (row ranges of
    the serial loop, or the twin `threaded`, made on first use) and the rule that picks one
    per call; called as the loop is."""

    def __init__(self, function, grain, partitioned, rows, work):
        self.function = function
        self.grain = grain
        self.partitioned = partitioned
        self.work = work
        self.serial = jit(function)
        self._threaded = None
        names = self.names = function.__code__.co_varnames[:function.__code__.co_argcount]
        unknown = set(rows or ()) - set(names)
        if unknown:
            raise TypeError(f"{function.__name__} has no parameter {sorted(unknown)}")
        positions = [names.index(name) for name in rows or ()]
        self.rows_from = positions[0] if positions else None  # gives the row count
        self.split = sum(1 << position for position in positions)
        self._addresses = {}  # argument types -> the serial loop's compiled code

    @property
    def threaded(self):
        if self._threaded is None:
            self._threaded = jit(_twin(self.function), parallel=True)
        return self._threaded

    def _address(self, args):
        """The address of the serial loop compiled for `args`' types (compiled or loaded
        from the cache on first use), or 0 when their rows cannot be cut (an F-ordered
        matrix: the kernels' callers pass C-ordered ones)."""
        key = tuple(map(_type_key, args))
        address = self._addresses.get(key)
        if address is None:
            signature = tuple(map(numba.typeof, args))
            if any(isinstance(t, numba.types.Array) and t.ndim > 1 and t.layout == "F"
                   for t in signature):
                self._addresses[key] = 0  # a row range of it would not be F-ordered
                return 0
            self.serial.compile(signature)
            compiled = self.serial.overloads[signature]
            if compiled.signature.return_type != numba.types.none:
                raise TypeError(f"{self.function.__name__} returns a value: its rows cannot "
                                "be split among threads")
            address = compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name)
            self._addresses[key] = address
        return address

    def threads_for(self, args):
        """How many threads a call on `args` gets (1: the serial loop)."""
        if Settings.intra_op < 2 or _Region.serial_only or not _may_start_a_team():
            return 1
        work = (max(arg.size for arg in args if isinstance(arg, np.ndarray))
                if self.work is None else self.work(**dict(zip(self.names, args))))
        grain = self.grain * WORKQUEUE_GRAINS if _layer() == "workqueue" else self.grain
        return max(1, min(Settings.intra_op, _POOL, work // grain))

    def __call__(self, *args):
        if Settings.intra_op > 1:  # the one test a call on one thread pays
            threads = self.threads_for(args)
            if threads > 1 and _Region.lock.acquire(blocking=False):
                try:
                    if _Region.starter is None:
                        _Region.starter = threading.get_ident()
                    if numba.get_num_threads() != threads:
                        numba.set_num_threads(threads)  # per Python thread in numba
                    if self.rows_from is None:
                        loop = self.threaded
                        return loop(*args, threads) if self.partitioned else loop(*args)
                    address = self._address(args)
                    if address:
                        return _launch(_driver_address(), address, args, self.split,
                                       args[self.rows_from].shape[0], threads)
                finally:
                    _Region.lock.release()
        return self.serial(*args, 1) if self.partitioned else self.serial(*args)


def parallel(grain=1 << 15, partitioned=False, rows=None, work=None):
    """Make a prange loop a `Parallel` kernel. `rows`: the names of the arrays whose first
    dimension the prange runs over, one row (or element) per iteration, which nothing else
    in the loop reads across rows; threads then run the serial loop on ranges of them.
    `partitioned` (a loop without `rows`): the loop takes the number of threads as its last
    argument, to cut its work into that many parts (the parts must not change its result).
    `work`: a function of the call's arguments (by name) giving the work that one threaded
    region shares out, in the units of `grain` (default: the largest array's elements; a
    loop that opens a region per step of a sequence gives one step's work)."""
    def wrap(function):
        return Parallel(function, grain, partitioned, rows, work)
    return wrap
