"""What one RPC message is made of, and how Python values become one and back.

A message is a header plus zero or more raw arrays:

    header = pickle((kind, msg_id, data_tag, array_layouts, autograd, body, packed))

`body` is the payload (function, args, result, ...) pickled with every Tensor and numpy array
replaced by a reference to an entry of `arrays`. The arrays travel as MPI buffers of their
own right after the header, on the header's `data_tag` (unique per message, so arrays of
messages sent at once by several threads never mix), and are received into fresh arrays
before the body is unpickled. So a 16 MB tensor is one MPI message of 16 MB: no pickling,
no copy unless it was not C-contiguous. Small tensors (64 KiB in all, at most) go inside the
header instead, as `packed`, their bytes one after another: one MPI message per call. RRefs in a payload go through their fork protocol
(see rref.py); tensors that require grad inside a distributed autograd context are recorded
as one send/recv pair per message (see mpigrad.distributed.autograd).
"""
import importlib
import io
import pickle
import traceback
import types

import numpy as np

from ... import ops
from ...nn import functional
from ...tensor import Tensor
from ..buffers import SUPPORTED_DTYPES

_SENDABLE = frozenset(SUPPORTED_DTYPES)


class _Pickler(pickle.Pickler):
    def __init__(self, file, fork_rref, record_grad):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays = []
        self.grad_tensors = []
        self._index = {}  # id(obj) -> its persistent id: one array per object, identity kept
        self._keep = []   # the objects behind _index's ids stay alive while pickling
        self._fork_rref = fork_rref
        self._record_grad = record_grad

    def persistent_id(self, obj):
        named = _public_names().get(id(obj))
        if named is not None:
            return named
        kind = type(obj)
        if kind is not np.ndarray and not isinstance(obj, (Tensor, _RRefBase)):
            return None
        known = self._index.get(id(obj))
        if known is not None:
            return known
        if isinstance(obj, _RRefBase):
            pid = ("rref", self._fork_rref(obj))
        else:
            array = obj.data if isinstance(obj, Tensor) else obj
            if array.dtype not in _SENDABLE:
                return None  # object arrays and the like go by ordinary pickle
            self.arrays.append(array if array.flags.c_contiguous else np.ascontiguousarray(array))
            index = len(self.arrays) - 1
            if kind is np.ndarray:
                pid = ("array", index)
            else:
                grad_slot = None
                if self._record_grad and obj.requires_grad:
                    self.grad_tensors.append(obj)
                    grad_slot = len(self.grad_tensors) - 1
                pid = ("tensor", index, obj.requires_grad, grad_slot)
        self._index[id(obj)] = pid
        self._keep.append(obj)
        return pid


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, arrays, grad_node, load_rref):
        super().__init__(file)
        self._arrays = arrays
        self._grad_node = grad_node
        self._load_rref = load_rref
        self._loaded = {}

    def persistent_load(self, pid):
        obj = self._loaded.get(pid)
        if obj is None:
            obj = self._loaded[pid] = self._load(pid)
        return obj

    def _load(self, pid):
        kind = pid[0]
        if kind == "function":
            return getattr(importlib.import_module(pid[1]), pid[2])
        if kind == "array":
            return self._arrays[pid[1]]
        if kind == "rref":
            return self._load_rref(pid[1])
        _, index, requires_grad, grad_slot = pid
        tensor = Tensor.wrap(self._arrays[index])
        if grad_slot is not None and self._grad_node is not None:
            tensor.set_history(self._grad_node, grad_slot)
        elif requires_grad:
            tensor.requires_grad_(True)
        return tensor


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


class _RRefBase:
    """Marker base of RRef, so this module finds RRefs without importing rref.py."""
    __slots__ = ()


def dumps(payload, fork_rref, record_grad):
    """Pickle `payload`; returns (body bytes, arrays to send, tensors that need a send
    function). Raises a TypeError naming the payload when something cannot be pickled."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, fork_rref, record_grad)
    try:
        pickler.dump(payload)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(f"cannot send this over RPC: {exc}. Functions travel by qualified name, "
                        f"so they must be defined at the top level of a module both sides can "
                        f"import (not a lambda or a local function); other values must be "
                        f"picklable") from exc
    return buffer.getvalue(), pickler.arrays, pickler.grad_tensors


def loads(body, arrays, grad_node, load_rref):
    return _Unpickler(io.BytesIO(body), arrays, grad_node, load_rref).load()


def layout(array):
    return array.shape, array.dtype.str


# The most one message may declare: a header is the other side's word, and an absurd or
# forged one must cost an error, not this process's memory.
MAX_MESSAGE_BYTES = 1 << 34


def empty_like_layouts(layouts):
    """Arrays to receive a message's tensors into, after checking what the header declares:
    supported dtypes, non-negative integer shapes, at most MAX_MESSAGE_BYTES in all."""
    if not isinstance(layouts, (list, tuple)):
        raise ValueError(f"a message declared its tensors as {type(layouts).__name__}")
    checked, total = [], 0
    for shape, dtype_text in layouts:
        dtype = np.dtype(dtype_text)
        if dtype.newbyteorder("=") not in SUPPORTED_DTYPES:
            raise ValueError(f"a message declared a tensor of dtype {dtype}")
        if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)):
            raise ValueError(f"a message declared a tensor of shape {shape!r}")
        total += int(np.prod(shape, dtype=object)) * dtype.itemsize
        if total > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message declared more than {MAX_MESSAGE_BYTES} bytes of "
                             "tensors")
        checked.append((shape, dtype))
    return [np.empty(shape, dtype) for shape, dtype in checked]


def unpack_into(arrays, packed):
    """Fill `arrays` (from empty_like_layouts) with the tensors a header carried inline,
    one after another in `packed`; ValueError if their sizes do not add up."""
    if not isinstance(packed, bytes) or len(packed) != sum(a.nbytes for a in arrays):
        raise ValueError(f"a message carried {len(packed) if isinstance(packed, bytes) else 0} "
                         f"bytes of tensors inline but declared "
                         f"{sum(a.nbytes for a in arrays)}")
    offset = 0
    for array in arrays:
        flat = array.reshape(-1).view(np.uint8)
        flat[:] = np.frombuffer(packed, np.uint8, array.nbytes, offset)
        offset += array.nbytes


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
