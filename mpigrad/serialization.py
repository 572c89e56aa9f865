"""Checkpoints: `save(obj, path)` and `load(path)`, the roles of torch.save/torch.load.

A checkpoint is an ordinary numpy `.npz` archive. Every array (a Tensor's
storage, a numpy array, a numpy scalar) is one member; the nesting around them
(dicts, lists, tuples, numbers, strings) is a JSON manifest stored as a uint8
member. Nothing is pickled, so loading a file cannot run code: numpy is asked
to refuse pickled members and the manifest is parsed by `json`.

Writes are atomic: the archive goes to a hidden temporary file in the target's
directory, is flushed to disk, and only then renamed over the target. A crash
mid-write leaves the previous checkpoint untouched (and, after a hard kill, a
stray `.<name>.<random>.tmp` file that is safe to delete).
"""

import json
import os
import secrets
import zipfile
import zlib

import numpy as np

from .tensor import Tensor

__all__ = ["save", "load"]

_FORMAT = "mpigrad.checkpoint"
_VERSION = 1
_MANIFEST = "manifest"

# What can fail while numpy reads an archive that is not what it claims to be:
# random bytes look like a pickle (ValueError), a cut-off file ends early
# (EOFError) or has no zip directory (BadZipFile), a flipped byte fails the
# CRC (BadZipFile) or the inflater (zlib.error).
_READ_ERRORS = (ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def save(obj, path):
    """Write `obj` to `path` atomically.

    `obj` is any nesting of dicts (str or int keys), lists and tuples whose
    leaves are Tensors, numpy arrays and scalars, Python numbers, strings,
    bools and None: model and optimizer state dicts, scheduler states, epoch
    counters. A Tensor or array that appears several times is stored once and
    comes back as one shared object.
    """
    arrays = []
    root = _encode(obj, arrays, {}, "obj")
    manifest = json.dumps({"format": _FORMAT, "version": _VERSION, "root": root})
    members = {_MANIFEST: np.frombuffer(manifest.encode("utf-8"), dtype=np.uint8)}
    members.update((f"a{i}", array) for i, array in enumerate(arrays))

    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    # os.open with 0o666 (not mkstemp's 0o600) so the checkpoint gets the same
    # permissions as any other file the user creates under their umask.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            np.savez(file, **members)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    _fsync_directory(directory)


def load(path):
    """Read a checkpoint written by `save` and rebuild the object.

    Tensors come back as Tensors (dtype, shape and `requires_grad` kept),
    numpy arrays as arrays, tuples as tuples, int dict keys as ints; every
    dict comes back as a plain `dict`. Raises `ValueError` naming the file
    if it is not an mpigrad checkpoint or is damaged.
    """
    with open(path, "rb") as file:
        try:
            archive = np.load(file, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("it holds a single .npy array")
            with archive:
                return _Reader(archive).read()
        except _READ_ERRORS as err:
            raise ValueError(f"{os.fspath(path)} is not a valid mpigrad checkpoint: {err}") from err


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
        return {"tensor": _store(obj, obj.data, arrays, slots, where),
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
    if id(owner) not in slots:
        # The owner stays referenced by the object being saved, so its id
        # cannot be reused by another object while save() runs.
        slots[id(owner)] = len(arrays)
        arrays.append(array)
    return slots[id(owner)]


class _Reader:
    """Rebuilds the saved object from an open archive, checking every node."""

    def __init__(self, archive):
        self.archive = archive
        self.built = {}  # member index -> object, so shared arrays stay shared

    def read(self):
        if _MANIFEST not in self.archive.files:
            raise ValueError("an .npz archive without an mpigrad manifest")
        raw = self.archive[_MANIFEST]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"manifest member is {raw.dtype} of shape {raw.shape}, "
                             "expected 1-D uint8")
        manifest = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
            raise ValueError("manifest does not describe an mpigrad checkpoint")
        if manifest.get("version") != _VERSION:
            raise ValueError(f"checkpoint format version {manifest.get('version')!r}; "
                             f"this mpigrad reads version {_VERSION}")
        return self.decode(manifest.get("root"))

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict):
            raise ValueError(f"unexpected manifest entry {node!r}")
        if node.keys() == {"tensor", "requires_grad"}:
            requires_grad = bool(node["requires_grad"])
            return self.member(node["tensor"], lambda a: Tensor(a, requires_grad=requires_grad))
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
        if type(index) is not int or name not in self.archive.files:
            raise ValueError(f"manifest refers to a missing array {index!r}")
        if index not in self.built:
            self.built[index] = build(self.archive[name])
        return self.built[index]


def _fsync_directory(directory):
    """Make the rename itself durable: it lives in the directory's entries."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
