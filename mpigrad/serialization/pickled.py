"""torch.save's own format, which torch.load reads and writes: a zip archive holding
`data.pkl` (the object, pickled with protocol 2) and one raw little-endian member per tensor
storage, `data/<key>`, that the pickle names through persistent ids.

Tensors are written under torch's names (`torch._utils._rebuild_tensor_v2`,
`torch.FloatStorage`, ...), so a state dict saved here loads in torch with
`weights_only=True`, and torch's files load here as mpigrad tensors: reading maps those names
to mpigrad's.

Loading is unpickling, which can run any code the file names. With `weights_only=True` (the
default, as in torch 2.6 and later) the unpickler resolves only an allow-list of names --
torch's tensor, parameter, storage, dtype, device and Size names, `OrderedDict`, `Counter`,
`set`, `bytearray`, `complex`, bytes' `_codecs.encode` -- plus what the user adds with
`add_safe_globals` / `safe_globals`; any other global is an `UnpicklingError` before it is
imported or called. Every callable the pickle can reach comes from that list, so a payload
(`os.system` in a `__reduce__`) never runs. `weights_only=False` resolves any name: only for
files from a source trusted like code (docs/security.md, "Files").
"""
import codecs
import collections
import contextlib
import io
import pickle
import secrets
import struct
import sys
import zipfile
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING

import numpy as np

from .. import dtypes
from ..device import device
from ..tensor import Tensor
from .checkpoint import READ_ERRORS

__all__ = ["write", "read", "is_torch_archive", "add_safe_globals", "clear_safe_globals",
           "get_safe_globals", "safe_globals"]

_PROTOCOL = 2  # torch.save's default protocol
_ALIGNMENT = 64  # torch aligns each storage's bytes to 64 in the archive
_ARCHIVE = "archive"

# torch's storage type names, by dtype: FloatStorage for float32 and so on.
_STORAGE_NAMES = {np.dtype(numpy_name): f"{torch_name}Storage"
                  for numpy_name, torch_name in dtypes._TORCH_NAMES.items()}
_STORAGE_DTYPES = {name: dtype for dtype, name in _STORAGE_NAMES.items()}
# torch's dtype names (torch.float32 pickles as the global torch.float32).
_DTYPE_NAMES = {name: np.dtype(name) for name in dtypes._TORCH_NAMES}
_DTYPE_NAMES.update(float=dtypes.float32, double=dtypes.float64, half=dtypes.float16,
                    long=dtypes.int64, int=dtypes.int32, short=dtypes.int16,
                    cfloat=dtypes.complex64, cdouble=dtypes.complex128)

# The user's additions to the allow-list: "module.qualname" -> object.
_user_safe_globals = {}


# ----------------------------------------------------------------------------- writing
class _TorchName:
    """A global written under torch's name, which need not exist in this process."""
    __slots__ = ("module", "name")
    _cache = {}

    def __new__(cls, module, name):
        key = (module, name)
        if key not in cls._cache:
            self = object.__new__(cls)
            self.module, self.name = key
            cls._cache[key] = self
        return cls._cache[key]

    def __call__(self, *args):
        # pickle requires a reduce function to be callable; this one is only ever written.
        raise TypeError(f"{self.module}.{self.name} is torch's, written into files only")


_REBUILD_TENSOR = _TorchName("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = _TorchName("torch._utils", "_rebuild_parameter")


class _Storage:
    """One storage member: a C-contiguous array that tensors are views into."""
    __slots__ = ("key", "array")

    def __init__(self, key, array):
        self.key, self.array = key, array


class _Pickler(pickle._Pickler):
    # The Python pickler, because only it lets a global be written without importing it
    # (torch's names, for a state dict torch can load).
    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file):
        super().__init__(file, protocol=_PROTOCOL)
        self.storages = {}

    def _save_torch_name(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
        self.memoize(obj)

    dispatch[_TorchName] = _save_torch_name

    def persistent_id(self, obj):
        if type(obj) is not _Storage:
            return None
        storage_type = _TorchName("torch", _STORAGE_NAMES[obj.array.dtype])
        return ("storage", storage_type, obj.key, "cpu", obj.array.size)

    def reducer_override(self, obj):
        if not isinstance(obj, Tensor):
            return NotImplemented
        if _is_parameter(obj):
            # torch's form: the parameter rebuilt around a plain tensor on its storage.
            return _REBUILD_PARAMETER, (Tensor.wrap(obj._array), obj.requires_grad,
                                        collections.OrderedDict())
        return self._tensor_args(obj._array, obj.requires_grad)

    def _tensor_args(self, array, requires_grad):
        if array.dtype not in _STORAGE_NAMES:
            raise TypeError(f"cannot save a tensor of dtype {array.dtype} in torch's format")
        storage, offset, strides = self._storage_of(array)
        return _REBUILD_TENSOR, (storage, offset, tuple(array.shape), strides, requires_grad,
                                 collections.OrderedDict())

    def _storage_of(self, array):
        """The storage `array` views, its offset and its strides, in elements. Tensors that
        view one C-contiguous little-endian array share its storage, as torch's do after
        loading; any other array is stored alone as a contiguous copy."""
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        itemsize = array.itemsize
        offset_bytes = (array.__array_interface__["data"][0]
                        - root.__array_interface__["data"][0])
        shares = (root.flags.c_contiguous and root.dtype == array.dtype
                  and _little_endian(root.dtype) and offset_bytes % itemsize == 0
                  and all(s % itemsize == 0 and s >= 0 for s in array.strides))
        if not shares:
            root = array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
            offset_bytes = 0
        storage = self.storages.get(id(root))
        if storage is None:
            storage = self.storages[id(root)] = _Storage(str(len(self.storages)), root)
        return storage, offset_bytes // itemsize, tuple(s // itemsize for s in array.strides)


def _little_endian(dtype):
    return dtype.byteorder == "<" or (dtype.byteorder in "=|" and sys.byteorder == "little")


def _is_parameter(tensor):
    # nn is a layer above serialization: its Parameter class is found by name.
    return any(c.__name__ == "Parameter" and c.__module__ == "mpigrad.nn.parameter"
               for c in type(tensor).__mro__)


def write(obj, file):
    """Write `obj` to the open binary `file` in torch.save's zip format."""
    data = io.BytesIO()
    pickler = _Pickler(data)
    pickler.dump(obj)
    records = [("data.pkl", data.getvalue()), (".format_version", b"1"),
               (".storage_alignment", str(_ALIGNMENT).encode()), ("byteorder", b"little")]
    records += [(f"data/{s.key}", s.array.tobytes()) for s in pickler.storages.values()]
    records += [("version", b"3\n"),
                (".data/serialization_id", str(secrets.randbits(128)).zfill(40).encode())]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, payload in records:
            _write_aligned(archive, file, f"{_ARCHIVE}/{name}", payload)


def _write_aligned(archive, file, name, payload):
    """A stored member whose bytes start at a multiple of 64, as torch writes them (its
    reader maps storages in place), padded with a private extra field as torch's is."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    start = archive.fp.tell() + 30 + len(name.encode("utf-8"))
    padding = -(start + 4) % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
    archive.writestr(info, payload)


# ----------------------------------------------------------------------------- reading
class _StorageType:
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    array = _view(storage, storage_offset, size, stride)
    t = Tensor.wrap(array)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _rebuild_tensor_v2(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks=None, state=None):
    # nn is a layer above serialization; a Parameter is made only when a file holds one.
    from ..nn.parameter import Parameter
    param = Parameter(data, requires_grad=requires_grad)
    return param


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _rebuild_parameter(data, requires_grad)


def _rebuild_from_type_v2(func, new_type, args, state):
    return func(*args)


def _view(storage, offset, size, stride):
    """The tensor the file describes, as a view of its storage (so tensors that shared a
    storage still share it); bounds are checked, as a hostile file may lie about them."""
    if not isinstance(storage, np.ndarray):
        raise pickle.UnpicklingError("a tensor's storage is not a storage record")
    size, stride, offset = tuple(int(n) for n in size), tuple(int(s) for s in stride), \
        int(offset)
    if len(size) != len(stride) or min(size + stride + (offset,), default=0) < 0:
        raise pickle.UnpicklingError(f"a tensor's size {size}, stride {stride} or offset "
                                     f"{offset} is invalid")
    if 0 not in size:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= storage.size:
            raise pickle.UnpicklingError(f"a tensor of size {size} and stride {stride} at "
                                         f"offset {offset} reaches past its storage of "
                                         f"{storage.size} elements")
    else:
        offset = 0
    item = storage.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], size, [s * item for s in stride])


def _lazy_parameter_class():
    from ..nn.parameter import Parameter  # nn is a layer above serialization
    return Parameter


# torch's names that resolve with weights_only=True, and what they are here.
_ALLOWED = {
    "collections.OrderedDict": collections.OrderedDict,
    "collections.Counter": collections.Counter,
    "_codecs.encode": codecs.encode,  # how protocol 2 writes bytes
    "builtins.bytearray": bytearray,
    "builtins.set": set,
    "builtins.complex": complex,
    "torch.Size": tuple,
    "torch.device": device,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
}
_ALLOWED.update({f"torch.{name}": _StorageType(dtype) for name, dtype in _STORAGE_DTYPES.items()})
_ALLOWED.update({f"torch.{name}": dtype for name, dtype in _DTYPE_NAMES.items()})
_ALLOWED_LAZY = {"torch.nn.parameter.Parameter": _lazy_parameter_class,
                 "torch.Tensor": lambda: Tensor}


def _allowed(full_name):
    if full_name in _ALLOWED:
        return _ALLOWED[full_name]
    if full_name in _ALLOWED_LAZY:
        return _ALLOWED_LAZY[full_name]()
    return _user_safe_globals.get(full_name, _MISSING)


_MISSING = object()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, prefix, weights_only):
        super().__init__(file)
        self.archive, self.prefix, self.weights_only = archive, prefix, weights_only
        self.loaded = {}

    def find_class(self, module, name):
        if (module, name) in NAME_MAPPING:  # protocol 2 writes Python 2's names
            module, name = NAME_MAPPING[(module, name)]
        elif module in IMPORT_MAPPING:
            module = IMPORT_MAPPING[module]
        full_name = f"{module}.{name}"
        found = _allowed(full_name)
        if found is not _MISSING:
            return found
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"Weights only load failed: the file names the global {full_name}, which "
                "weights_only=True does not load (unpickling it could run any code). If you "
                "trust the file's source as you would trust code, load it with "
                "weights_only=False, or allow the name with "
                "mpigrad.serialization.add_safe_globals([...]) or the safe_globals([...]) "
                "context manager.")
        if module == "torch" or module.startswith("torch."):
            return _mpigrad_counterpart(module, name)
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.100}")
        _, storage_type, key, location, numel = pid
        if key not in self.loaded:
            dtype = storage_type.dtype
            raw = self.archive.read(f"{self.prefix}data/{key}")
            if len(raw) != int(numel) * dtype.itemsize:
                raise pickle.UnpicklingError(f"storage {key} holds {len(raw)} bytes, not the "
                                             f"{numel} elements of {dtype} it claims")
            self.loaded[key] = np.frombuffer(bytearray(raw), dtype.newbyteorder("<")).astype(
                dtype, copy=False)
        return self.loaded[key]


def _mpigrad_counterpart(module, name):
    """weights_only=False: a torch class or function in a trusted file is mpigrad's
    namesake (mpigrad mirrors torch's module paths), or an error naming it."""
    target = "mpigrad" + module[len("torch"):]
    try:
        __import__(target)
        found = sys.modules[target]
        for part in name.split("."):
            found = getattr(found, part)
        return found
    except (ImportError, AttributeError):
        raise pickle.UnpicklingError(f"the file names {module}.{name}, which has no mpigrad "
                                     f"counterpart ({target}.{name})") from None


def is_torch_archive(file):
    """Whether the open binary `file` is a zip archive in torch.save's format; the file's
    position is put back at the start."""
    try:
        with zipfile.ZipFile(file) as archive:
            return _pickle_member(archive) is not None
    except READ_ERRORS:  # not a zip archive, or a damaged one: not torch's either way
        return False
    finally:
        file.seek(0)


def _pickle_member(archive):
    return next((n for n in archive.namelist()
                 if n.endswith("data.pkl") and n.count("/") == 1), None)


def read(file, weights_only=True):
    """The object in torch.save's archive `file` (see the module docstring for what
    `weights_only` lets through)."""
    with zipfile.ZipFile(file) as archive:
        member = _pickle_member(archive)
        if member is None:
            raise pickle.UnpicklingError("the archive has no data.pkl: not torch.save's format")
        prefix = member[:-len("data.pkl")]
        unpickler = _Unpickler(io.BytesIO(archive.read(member)), archive, prefix,
                               weights_only)
        return unpickler.load()


# ----------------------------------------------------------------------------- allow-list
def _name_of(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


def add_safe_globals(safe_globals):
    """Allow `weights_only=True` loads to resolve these objects (classes or functions), or
    `(object, "module.name")` pairs naming them as the file does. Only for types whose
    construction from a file cannot do harm."""
    for entry in safe_globals:
        obj, name = entry if isinstance(entry, tuple) else (entry, _name_of(entry))
        _user_safe_globals[name] = obj


def clear_safe_globals():
    _user_safe_globals.clear()


def get_safe_globals():
    """The objects `add_safe_globals` allowed (as torch: the objects, or pairs for objects
    added under another name)."""
    return [obj if _name_of_or_none(obj) == name else (obj, name)
            for name, obj in _user_safe_globals.items()]


def _name_of_or_none(obj):
    try:
        return _name_of(obj)
    except AttributeError:
        return None


@contextlib.contextmanager
def safe_globals(safe_globals):
    """`with safe_globals([...]):` the names are allowed inside the block only."""
    saved = dict(_user_safe_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _user_safe_globals.clear()
        _user_safe_globals.update(saved)
