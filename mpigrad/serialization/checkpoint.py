"""mpigrad's own checkpoint format: a zip archive of `.npy` members that numpy's `np.load`
also reads. Every array (a Tensor's storage, a numpy array, a numpy scalar) is one member; the
nesting around them (dicts, lists, tuples, numbers, strings) is a JSON manifest stored as a
uint8 member. The archive's comment, its last bytes, is the SHA-256 of everything before it.
Nothing is pickled, so loading a file cannot run code: pickled members are refused and the
manifest is parsed by `json`.

Loading trusts nothing in the file: the checksum is verified before anything is parsed, then
members must be stored uncompressed and unencrypted and each is read whole (zip's CRC-32
checked) and its header compared with its size before numpy sees it, so any damage -- a
truncation, a flipped bit in the zip structure, the manifest or the array data -- raises one
`ValueError` naming the file instead of loading wrong numbers. Only numeric and bool arrays
load; absurd shapes, nesting too deep for Python, dtypes with no tensor meaning and members
whose sizes add up to more than the file (overlapping members, which would cost memory in the
square of the file's size) are the same `ValueError`, so what a load allocates stays a small
multiple of the file's size.
"""

import hashlib
import io
import json
import math
import os
import struct
import zipfile
import zlib

import numpy as np

from ..dtypes import is_differentiable
from ..tensor import Tensor

__all__ = ["encode", "write", "read"]

_FORMAT = "mpigrad.checkpoint"
_VERSION = 2  # 2: the archive ends with the SHA-256 of the file as its comment
_MANIFEST = "manifest"
_CHECKSUM_TAG = b"mpigrad-sha256:"
_TRAILER_BYTES = len(_CHECKSUM_TAG) + 64  # the tag and the hex digest
# bool, signed and unsigned integers, floats, complex: the dtypes a tensor can hold.
_TENSOR_KINDS = "biufc"

# What zipfile, json and numpy raise on bytes that are not what they claim to be: a
# cut-off file ends early (EOFError) or has no zip directory (BadZipFile), a
# flipped bit fails the CRC (BadZipFile), points a header past the end of the
# file (OSError from a negative seek, struct.error) or names a compression
# method that does not exist (NotImplementedError); the manifest may no longer
# decode or parse (ValueError), or nest deeper than Python recurses (RecursionError);
# a shape may not fit a C integer (OverflowError).
READ_ERRORS = (ValueError, EOFError, OSError, KeyError, struct.error, zipfile.BadZipFile,
               zlib.error, NotImplementedError, RecursionError, OverflowError)


def encode(obj):
    """The members of `obj`'s checkpoint (see `mpigrad.save`), name to array; TypeError for
    anything a checkpoint cannot hold, before any file is touched."""
    arrays = []
    root = _encode(obj, arrays, {}, "obj")
    manifest = json.dumps({"format": _FORMAT, "version": _VERSION, "root": root})
    members = {_MANIFEST: np.frombuffer(manifest.encode("utf-8"), dtype=np.uint8)}
    members.update((f"a{i}", array) for i, array in enumerate(arrays))
    return members


def write(members, file):
    """Write `encode`'s members to the open binary `file` as a checksummed archive."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for member, array in members.items():
            with archive.open(f"{member}.npy", "w", force_zip64=True) as stream:
                np.lib.format.write_array(stream, np.asanyarray(array), allow_pickle=False)
        # A placeholder of the digest's length, so the bytes before it are final.
        archive.comment = _CHECKSUM_TAG + b"0" * 64
    digest = _sha256_before_trailer(file)
    file.seek(-64, os.SEEK_END)
    file.write(digest.encode("ascii"))


def read(file):
    """The object stored in the open binary `file`; any damage raises one of READ_ERRORS."""
    if file.read(6) == b"\x93NUMPY":
        raise ValueError("it holds a single .npy array")
    checked = _verify_checksum(file)
    size = file.seek(0, os.SEEK_END)
    with zipfile.ZipFile(file) as archive:
        return _Reader(archive, checked, size).read()


def _sha256_before_trailer(file):
    """Hex SHA-256 of `file` up to its checksum trailer, read in chunks."""
    end = file.seek(0, os.SEEK_END) - _TRAILER_BYTES
    file.seek(0)
    digest = hashlib.sha256()
    while file.tell() < end:
        digest.update(file.read(min(1 << 20, end - file.tell())))
    return digest.hexdigest()


def _verify_checksum(file):
    """Whether `file` ends with a checksum, which must then match; version 1
    checkpoints have none and rely on zip's CRC-32 alone."""
    size = file.seek(0, os.SEEK_END)
    if size < _TRAILER_BYTES:
        return False
    file.seek(size - _TRAILER_BYTES)
    trailer = file.read()
    if not trailer.startswith(_CHECKSUM_TAG):
        return False
    if _sha256_before_trailer(file).encode("ascii") != trailer[len(_CHECKSUM_TAG):]:
        raise ValueError("its SHA-256 checksum does not match: the file is damaged")
    return True


def _encode(obj, arrays, slots, where):
    """The JSON form of `obj`; arrays are appended to `arrays`.

    Containers and arrays become one-key objects tagging their kind, so a JSON
    object in the manifest is never ambiguous with the plain values (JSON's
    own null, bools, numbers, strings) that stand for themselves.
    `slots` maps id() of already stored arrays to their member index.
    """
    # Before the Python types: np.float64 is a float, and would lose its type.
    if isinstance(obj, np.generic):
        return {"scalar": _store(obj, np.asarray(obj), arrays, slots, where)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Tensor):
        return {"tensor": _store(obj, obj._array, arrays, slots, where),
                "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, np.ndarray):
        return {"ndarray": _store(obj, obj, arrays, slots, where)}
    if isinstance(obj, dict):
        pairs = []
        for key, value in obj.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"mpigrad.save: dict keys must be str or int, but {where} "
                                f"has a key of type {type(key).__name__}: {key!r}")
            pairs.append([key, _encode(value, arrays, slots, f"{where}[{key!r}]")])
        return {"dict": pairs}
    if isinstance(obj, (list, tuple)):
        items = [_encode(item, arrays, slots, f"{where}[{i}]") for i, item in enumerate(obj)]
        return {"tuple" if isinstance(obj, tuple) else "list": items}
    raise TypeError(f"mpigrad.save cannot store {where} of type {type(obj).__name__}: expected "
                    "dicts, lists, tuples, Tensors, numpy arrays, numbers, strings, bools or None")


def _store(owner, array, arrays, slots, where):
    if array.dtype.hasobject:
        raise TypeError(f"mpigrad.save cannot store {where}: its dtype {array.dtype} holds "
                        "Python objects, which could only be written with pickle")
    if array.dtype.kind not in _TENSOR_KINDS:
        raise TypeError(f"mpigrad.save cannot store {where}: its dtype {array.dtype} is not "
                        "a numeric or bool dtype")
    if id(owner) not in slots:
        # The owner stays referenced by the object being saved, so its id
        # cannot be reused by another object while save() runs.
        slots[id(owner)] = len(arrays)
        arrays.append(array)
    return slots[id(owner)]


class _Reader:
    """Rebuilds the saved object from an open archive, checking every node."""

    def __init__(self, archive, checked, size):
        self.archive = archive
        self.checked = checked
        self.built = {}  # member index -> object, so shared arrays stay shared
        self.names = set(archive.namelist())  # namelist() is a fresh list per call
        # Members of a real archive lie side by side. Forged ones can overlap, each member's
        # data holding the next ones, so that reading them costs the square of the file's
        # size; sizes that add up to more than the file can only be that (or a lie).
        claimed = sum(max(info.file_size, info.compress_size) for info in archive.infolist())
        if claimed > size:
            raise ValueError(f"its members claim {claimed} bytes in all in a file of {size}: "
                             "they overlap or their sizes are forged")

    def read(self):
        if f"{_MANIFEST}.npy" not in self.names:
            raise ValueError("an .npz archive without an mpigrad manifest")
        raw = self.array(_MANIFEST)
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"manifest member is {raw.dtype} of shape {raw.shape}, "
                             "expected 1-D uint8")
        manifest = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
            raise ValueError("manifest does not describe an mpigrad checkpoint")
        version = manifest.get("version")
        if version not in (1, _VERSION):
            raise ValueError(f"checkpoint format version {version!r}; this mpigrad reads "
                             f"versions 1 to {_VERSION}")
        if version > 1 and not self.checked:
            raise ValueError(f"a version {version} checkpoint without its checksum")
        return self.decode(manifest.get("root"))

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict):
            raise ValueError(f"unexpected manifest entry {node!r}")
        if node.keys() == {"tensor", "requires_grad"}:
            return self.member(node["tensor"], lambda a: _tensor(a, node["requires_grad"]))
        if node.keys() == {"ndarray"}:
            return self.member(node["ndarray"], lambda a: a)
        if node.keys() == {"scalar"}:
            return self.member(node["scalar"], lambda a: a[()])
        if node.keys() == {"list"} and isinstance(node["list"], list):
            return [self.decode(item) for item in node["list"]]
        if node.keys() == {"tuple"} and isinstance(node["tuple"], list):
            return tuple(self.decode(item) for item in node["tuple"])
        if node.keys() == {"dict"} and isinstance(node["dict"], list):
            return {self.key(pair): self.decode(pair[1]) for pair in node["dict"]}
        raise ValueError(f"unexpected manifest entry {node!r}")

    def key(self, pair):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (str, int))):
            raise ValueError(f"malformed dict entry {pair!r}")
        return pair[0]

    def member(self, index, build):
        name = f"a{index}"
        if type(index) is not int or f"{name}.npy" not in self.names:
            raise ValueError(f"manifest refers to a missing array {index!r}")
        if index not in self.built:
            self.built[index] = build(self.array(name))
        return self.built[index]

    def array(self, name):
        """The array stored as member `name`, checked whole before numpy parses it."""
        info = self.archive.getinfo(f"{name}.npy")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise ValueError(f"member {name} is compressed or encrypted; mpigrad writes "
                             "neither")
        # zipfile allocates what the directory claims before reading; the sizes were bounded
        # by the file's in __init__, so a forged one costs no more than the file.
        raw = self.archive.read(info)  # checks zip's CRC-32
        header = io.BytesIO(raw)
        version = np.lib.format.read_magic(header)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"member {name} has .npy format version {version}")
        shape, fortran_order, dtype = read_header(header)
        if dtype.hasobject:
            raise ValueError(f"member {name} holds Python objects, which only pickle could "
                             "load; refused (mpigrad never pickles, see allow_pickle)")
        if dtype.kind not in _TENSOR_KINDS:
            raise ValueError(f"member {name} has dtype {dtype}, which is not a numeric or bool "
                             "dtype")
        count = math.prod(shape)  # exact: numpy's int64 product could wrap around
        if len(raw) - header.tell() != count * dtype.itemsize:
            raise ValueError(f"member {name} holds {len(raw) - header.tell()} bytes of data "
                             f"for an array of shape {shape} and dtype {dtype}")
        flat = np.frombuffer(raw, dtype=dtype, count=count, offset=header.tell())
        # A copy in native byte order: the parameters built from it must be writeable, and
        # every op assumes native arrays.
        return flat.reshape(shape, order="F" if fortran_order else "C").astype(
            dtype.newbyteorder("="), order="K")


def _tensor(array, requires_grad):
    if requires_grad and not is_differentiable(array.dtype):
        raise ValueError(f"a {array.dtype} tensor marked requires_grad; only floating point "
                         "and complex tensors can require gradients")
    return Tensor(array, requires_grad=bool(requires_grad))
