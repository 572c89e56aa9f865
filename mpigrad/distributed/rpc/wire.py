"""What one RPC message is made of, and how Python values become one and back.

A message is a header plus zero or more raw arrays. The header is one byte string:

    4 bytes: n | marshal((kind, msg_id, data_tag, array_layouts, autograd, body)), n bytes
              | padding | the arrays' bytes when they travel inline, each 16-byte aligned

`body` is the payload (function, args, result, ...) with every Tensor, numpy array, RRef,
WorkerInfo and function replaced by a reference, in one of two forms:

- fast (FAST, tree, rrefs): the payload itself when it is made of None, bools, ints, floats,
  complex numbers, strings, bytes, and tuples, lists and dicts of those (at most _MAX_NODES
  values, no list or dict twice, and a receiver refuses more), plus the referenced kinds
  above. References are tuples that start with Ellipsis (a user tuple that does too goes the
  other way). marshal writes and reads it in C: encoding and decoding a small call costs a
  few microseconds, where a pickler calling back into Python for every object cost five
  times that.
- pickled (PICKLED, bytes): anything else, by pickle, with the same references as
  persistent ids. The fast form is tried first and has no side effect until it succeeds
  (RRefs are forked after), so falling back never forks twice.

The arrays travel as MPI buffers of their own right after the header, on the header's
`data_tag` (unique per message, so arrays of messages sent at once by several threads never
mix), and are received into fresh arrays before the body is decoded. So a 16 MB tensor is
one MPI message of 16 MB: no pickling, no copy unless it is a view of the kind below. Small
tensors (64 KiB in all, at most) go inside the header instead: one MPI message per call, and
the received tensors are views of the received header. A tensor keeps its dtype, shape and
requires_grad; a view that covers memory at most twice its own size, every axis stepping
forward, travels as that span and keeps its strides (as torch's RPC does), any other one
(a column of a large matrix, a broadcast, negative strides) as a C-contiguous copy. RRefs
in a payload go through their fork protocol (see rref.py); tensors that require grad inside
a distributed autograd context are recorded as one send/recv pair per message (see
mpigrad.distributed.autograd).
"""
import importlib
import io
import marshal
import math
import pickle
import struct
import sys
import traceback
import types

import numpy as np

from ... import ops
from ...nn import functional
from ...tensor import Tensor
from ..buffers import SUPPORTED_DTYPES

_DTYPES = {np.dtype(d).str: np.dtype(d) for d in SUPPORTED_DTYPES}  # what a layout may name
_SENDABLE = frozenset(_DTYPES.values())
FAST, PICKLED = 0, 1
_MAX_NODES = 256  # values the fast form walks, at most; bigger payloads go by pickle
_PLAIN = frozenset((type(None), bool, int, float, complex, str, bytes))
_LENGTH = struct.Struct("<I")
_ALIGN = 16
_MAX_SPAN = 2  # a view's span may be at most this many times its own bytes to travel as is


class WorkerInfo:
    """A worker's name and id (its rank), as torch.distributed.rpc.WorkerInfo."""
    __slots__ = ("name", "id")

    def __init__(self, name, id):
        self.name, self.id = name, id

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.name, self.id) == (other.name, other.id)

    def __hash__(self):
        return hash((self.name, self.id))

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, name={self.name})"

    def __reduce__(self):
        return WorkerInfo, (self.name, self.id)


class _RRefBase:
    """Marker base of RRef, so this module finds RRefs without importing rref.py."""
    __slots__ = ()


class _NotFast(Exception):
    """The payload has something the fast form does not carry: pickle it."""


class _References:
    """What a message refers to rather than contains: its arrays (each object once, so
    identity survives the trip), the tensors among them that need a send function, and its
    RRefs."""

    def __init__(self, record_grad):
        self.arrays = []
        self.rrefs = []
        self.layouts = []
        self.grad_tensors = []
        self._index = {}  # id(obj) -> its reference
        self._keep = []   # the objects behind _index's ids stay alive meanwhile
        self._record_grad = record_grad

    def rref(self, rref):
        known = self._index.get(id(rref))
        if known is None:
            self.rrefs.append(rref)
            known = self._index[id(rref)] = ("rref", len(self.rrefs) - 1)
            self._keep.append(rref)
        return known

    def array(self, obj):
        """("tensor" | "array", ...) for a Tensor or ndarray; None for a dtype MPI cannot
        move (object arrays and the like), which only pickle carries."""
        known = self._index.get(id(obj))
        if known is not None:
            return known
        is_array = type(obj) is np.ndarray
        array = obj if is_array else obj._array
        if array.dtype not in _SENDABLE:
            return None
        span, strides = _span(array)
        self.arrays.append(span)
        self.layouts.append((array.shape, array.dtype.str, strides))
        index = len(self.arrays) - 1
        if is_array:
            ref = ("array", index)
        else:
            grad_slot = None
            if self._record_grad and obj.requires_grad:
                self.grad_tensors.append(obj)
                grad_slot = len(self.grad_tensors) - 1
            ref = ("tensor", index, obj.requires_grad, grad_slot)
        self._index[id(obj)] = ref
        self._keep.append(obj)
        return ref


def _span(array):
    """(the flat, contiguous array of memory to send, its strides in elements or None when
    C-contiguous). A view sends the memory from its first to its last element, and the
    receiver rebuilds the same strides (as torch's RPC sends a view's storage), when that
    memory is at most _MAX_SPAN times the view's own and every axis of more than one element
    steps forward; otherwise it sends a C-contiguous copy (as torch does for a view of a much
    larger storage): a column of a big matrix would carry the whole matrix, and a broadcast
    view (zero strides) would arrive as a writeable array whose elements alias each other."""
    if array.flags.c_contiguous and array.size:
        return array.reshape(-1), None
    itemsize = array.itemsize
    strides = array.strides
    if any(s % itemsize or s < 0 or (s == 0 and n > 1 and array.size)
           for n, s in zip(array.shape, strides)):
        return np.ascontiguousarray(array).reshape(-1), None
    elements = tuple(s // itemsize for s in strides)
    if not array.size:
        return array.reshape(-1), elements
    extent = _extent(array.shape, elements)
    if extent > _MAX_SPAN * array.size:
        return np.ascontiguousarray(array).reshape(-1), None
    return np.lib.stride_tricks.as_strided(array, (extent,), (itemsize,)), elements


def _extent(shape, strides):
    """How many elements a non-empty view of `shape` and `strides` (in elements) spans."""
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


class _Encoder:
    """The fast form's walk; see the module docstring."""

    def __init__(self, references):
        self.references = references
        self.nodes = 0
        self._containers = set()

    def encode(self, value):
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _NotFast
        kind = type(value)
        if kind in _PLAIN:
            return value
        if kind is tuple:
            if value and value[0] is Ellipsis:
                raise _NotFast
            return tuple([self.encode(v) for v in value])
        if kind is list:
            self._once(value)
            return [self.encode(v) for v in value]
        if kind is dict:
            self._once(value)
            out = {}
            for key, v in value.items():
                if type(key) not in _PLAIN:
                    raise _NotFast
                out[key] = self.encode(v)
            return out
        if kind is np.ndarray or isinstance(value, Tensor):
            ref = self.references.array(value)
        elif kind is WorkerInfo:
            ref = ("worker", value.name, value.id)
        elif isinstance(value, _RRefBase):
            ref = self.references.rref(value)
        else:
            ref = _name_of(value)
        if ref is None:
            raise _NotFast
        return (Ellipsis, *ref)

    def _once(self, container):
        """A list or dict met twice is one object that the fast form would make two of."""
        if id(container) in self._containers:
            raise _NotFast
        self._containers.add(id(container))


_names = {}  # id(function or class) -> (it, its reference): the sender's cache


def _name_of(value):
    """("function", module, qualified name) for a function or class the receiver can import
    by that name, as pickle would send it; None for anything else (a lambda, a local
    function, a bound method, an instance)."""
    known = _names.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    ref = _public_names().get(id(value))
    if ref is None:
        if not isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
            return None
        module, qualname = getattr(value, "__module__", None), value.__qualname__
        if not module or "<" in qualname or _resolve(sys.modules.get(module), qualname) \
                is not value:
            return None
        ref = ("function", module, qualname)
    _names[id(value)] = (value, ref)
    return ref


def _resolve(module, qualname):
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


_public = None


def _public_names():
    """mpigrad's public functions that pickle cannot name by reference (the op table's Op
    objects and lambdas), by id, so `rpc_sync(to, mg.add, ...)` works like `torch.add`."""
    global _public
    if _public is None:
        # The package face sits above this layer; it is complete by the time a message is
        # encoded, since importing any mpigrad module imports it first.
        import mpigrad
        table = {}
        for module in (functional, ops, mpigrad):
            for name, value in vars(module).items():
                if (callable(value) and not isinstance(value, (type, types.ModuleType))
                        and not _picklable(value)):
                    table[id(value)] = ("function", module.__name__, name)
        _public = table
    return _public


def _picklable(value):
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


class _Pickler(pickle.Pickler):
    def __init__(self, file, references):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.references = references

    def persistent_id(self, obj):
        named = _public_names().get(id(obj))
        if named is not None:
            return named
        if type(obj) is np.ndarray or isinstance(obj, Tensor):
            return self.references.array(obj)
        if isinstance(obj, _RRefBase):
            return self.references.rref(obj)
        return None


def dumps(payload, fork_rref, record_grad):
    """Encode `payload`; returns (body, arrays to send, their layouts, tensors that need a
    send function). `fork_rref(rref)` is called once per RRef in it, after encoding
    succeeded. Raises a TypeError naming the payload when something cannot be sent, a
    ValueError when its tensors exceed MAX_MESSAGE_BYTES."""
    references = _References(record_grad)
    try:
        body = [FAST, _Encoder(references).encode(payload)]
    except _NotFast:
        references = _References(record_grad)
        buffer = io.BytesIO()
        try:
            _Pickler(buffer, references).dump(payload)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise TypeError(f"cannot send this over RPC: {exc}. Functions travel by qualified "
                            f"name, so they must be defined at the top level of a module both "
                            f"sides can import (not a lambda or a local function); other "
                            f"values must be picklable") from exc
        body = [PICKLED, buffer.getvalue()]
    size = sum(a.nbytes for a in references.arrays)
    if size > MAX_MESSAGE_BYTES:  # before any RRef is forked: the message never leaves
        raise ValueError(f"an RPC message would carry {size} bytes of tensors; at most "
                         f"{MAX_MESSAGE_BYTES} go in one message (the receiver refuses more): "
                         "send the data in parts")
    body.append(tuple(fork_rref(r) for r in references.rrefs))
    return tuple(body), references.arrays, references.layouts, references.grad_tensors


def header(kind, msg_id, tag, layouts, autograd, body, inline=()):
    """The header's bytes; `inline`: the arrays it carries (tag 0), or none."""
    meta = marshal.dumps((kind, msg_id, tag, layouts, autograd, body))
    parts = [_LENGTH.pack(len(meta)), meta]
    end = _LENGTH.size + len(meta)
    for array in inline:
        pad = -end % _ALIGN
        parts.append(bytes(pad))
        parts.append(array)  # join takes any contiguous buffer: no copy before this one
        end += pad + array.nbytes
    return b"".join(parts)


def parse(received):
    """(kind, msg_id, tag, autograd, body, arrays, buffers) of a received header (a
    bytearray). `arrays` are what the body refers to; when the tensors travel apart (tag
    not 0) they are still to be received into `buffers`, else `buffers` is empty and the
    arrays are views of `received`. ValueError (or another error) for a malformed header."""
    (length,) = _LENGTH.unpack_from(received)
    start = _LENGTH.size
    kind, msg_id, tag, layouts, autograd, body = marshal.loads(
        memoryview(received)[start:start + length])
    if type(body) is tuple and body and body[0] == FAST:
        _check_size(body[1:2])
    arrays, buffers = _arrays_for(layouts, received if tag == 0 else None, start + length)
    return kind, msg_id, tag, autograd, body, arrays, buffers


def _check_size(values):
    """A ValueError if the fast form's `values` hold more than _MAX_NODES values in all, as
    the decoder would walk them. An honest sender never makes one (it pickles bigger
    payloads), but marshal stores a value used at several places once: a header of 189
    bytes reusing one tuple at each of 20 levels stood for a tree of 2**20 values, seconds
    and 112 MiB to decode. Each value is counted before its container is opened, so the
    check itself costs at most _MAX_NODES steps."""
    count = len(values)
    stack = list(values)
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is tuple:
            children = () if value and value[0] is Ellipsis else value
        elif kind is list:
            children = value
        elif kind is dict:
            children = value.values()
        else:
            continue
        count += len(children)
        if count > _MAX_NODES:
            raise ValueError(f"its body holds more than {_MAX_NODES} values (no sender makes "
                             "one: bigger payloads travel pickled)")
        stack.extend(children)


# The most one message may declare: a header is the other side's word, and an absurd or
# forged one must cost an error, not this process's memory.
MAX_MESSAGE_BYTES = 1 << 34


def _arrays_for(layouts, received, offset):
    """The arrays a header declares, checked (supported dtypes, non-negative integer shapes
    and strides, at most MAX_MESSAGE_BYTES in all): views of `received` from `offset` on
    when it carries them, else new ones, returned as well as the buffers to receive into."""
    if type(layouts) is not list:
        raise ValueError(f"a message declared its tensors as {type(layouts).__name__}")
    arrays, buffers, total = [], [], 0
    for shape, dtype_text, strides in layouts:
        dtype = _DTYPES.get(dtype_text)
        if dtype is None:
            raise ValueError(f"a message declared a tensor of dtype {dtype_text!r}")
        if not (type(shape) is tuple and all(type(n) is int and n >= 0 for n in shape)):
            raise ValueError(f"a message declared a tensor of shape {shape!r}")
        if strides is None:
            count = math.prod(shape)
        elif (type(strides) is tuple and len(strides) == len(shape)
              and all(type(s) is int and s >= 0 for s in strides)):
            count = 0 if 0 in shape else _extent(shape, strides)
        else:
            raise ValueError(f"a message declared a tensor of strides {strides!r}")
        size = count * dtype.itemsize
        total += size
        if total > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message declared more than {MAX_MESSAGE_BYTES} bytes of "
                             "tensors")
        if received is None:
            flat = np.empty(count, dtype)
            buffers.append(flat)
        else:
            offset += -offset % _ALIGN
            if offset + size > len(received):
                raise ValueError("a message declared more bytes of tensors than it carried")
            flat = np.frombuffer(received, dtype, count, offset)
            offset += size
        arrays.append(flat.reshape(shape) if strides is None else np.lib.stride_tricks.as_strided(
            flat, shape, tuple(s * dtype.itemsize for s in strides)))
    if received is not None and offset != len(received):
        raise ValueError(f"a message carried {len(received) - offset} bytes more than it declared")
    return arrays, buffers


def loads(body, arrays, grad_node, load_rref):
    """The payload `body` (from `dumps`, through `header` and `parse`) stands for, its
    references resolved: `arrays` from `parse`, tensors that require grad coming out of
    `grad_node` (None outside a distributed autograd context), RRefs by `load_rref`."""
    form, tree, forks = body
    decoder = _Decoder(arrays, grad_node, forks, load_rref)
    if form == PICKLED:
        return _Unpickler(io.BytesIO(tree), decoder).load()
    if form != FAST:
        raise ValueError(f"a message's body has the unknown form {form!r}")
    return decoder.restore(tree)


class _Decoder:
    def __init__(self, arrays, grad_node, forks, load_rref):
        self._arrays = arrays
        self._grad_node = grad_node
        self._forks = forks
        self._load_rref = load_rref
        self._loaded = {}

    def restore(self, value):
        kind = type(value)
        if kind is tuple:
            if value and value[0] is Ellipsis:
                return self.reference(value[1:])
            return tuple([self.restore(v) for v in value])
        if kind is list:
            return [self.restore(v) for v in value]
        if kind is dict:
            return {key: self.restore(v) for key, v in value.items()}
        return value

    def reference(self, ref):
        obj = self._loaded.get(ref)
        if obj is None:
            obj = self._loaded[ref] = self._load(ref)
        return obj

    def _load(self, ref):
        kind = ref[0]
        if kind == "tensor":
            _, index, requires_grad, grad_slot = ref
            tensor = Tensor.wrap(self._arrays[index])
            if grad_slot is not None and self._grad_node is not None:
                tensor.set_history(self._grad_node, grad_slot)
            elif requires_grad:
                tensor.requires_grad_(True)
            return tensor
        if kind == "array":
            return self._arrays[ref[1]]
        if kind == "function":
            return _import(ref[1], ref[2])
        if kind == "worker":
            return WorkerInfo(ref[1], ref[2])
        if kind == "rref":
            return self._load_rref(self._forks[ref[1]])
        raise ValueError(f"a message referred to an unknown kind of object {kind!r}")


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, decoder):
        super().__init__(file)
        self._decoder = decoder

    def persistent_load(self, pid):
        return self._decoder.reference(pid)


_imported = {}  # (module, qualified name) -> the function or class: the receiver's cache


def _import(module, qualname):
    obj = _imported.get((module, qualname))
    if obj is None:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        _imported[(module, qualname)] = obj
    return obj


def layout(array):
    """(shape, dtype) of a tensor recorded for distributed autograd."""
    return array.shape, array.dtype.str


# ---- errors ------------------------------------------------------------------------------

def describe_error(exc):
    """What travels back when a remote function raises: its type (by reference when it can be
    pickled), message and formatted traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.dumps(type(exc))
        kind = type(exc)
    except Exception:
        kind = None
    return kind, type(exc).__qualname__, str(exc), text


def rebuild_error(described, where):
    """The exception to raise at the caller: the remote type when it can be built from one
    message string, else RuntimeError; the message names the worker and carries the remote
    traceback."""
    kind, type_name, message, remote_traceback = described
    text = (f"{message}\n\n{type_name} raised on {where}. Remote traceback:\n"
            f"{remote_traceback.rstrip()}")
    if kind is not None:
        try:
            return kind(text)
        except Exception:
            pass
    return RuntimeError(f"{type_name}: {text}")
