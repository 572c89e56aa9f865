"""The safetensors format, so weights move between mpigrad and PyTorch's ecosystem.

A file is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range (`data_offsets`, relative to the end of the header) plus an optional
`__metadata__` map of strings, then the tensors' bytes, little-endian and row-major. It holds
a flat mapping of names to tensors and nothing that could run code, which is why torch users
exchange weights this way.

Reading trusts nothing: the header's length is capped, its JSON must be an object of
well-formed entries, every dtype must be one a tensor can hold, and the byte ranges must tile
the data section exactly (each the size its shape and dtype need, none overlapping, no gap,
none past the end), all checked before a byte of tensor data is read. Any violation is a
`ValueError`. bfloat16 is ml_dtypes' numpy dtype (mpigrad's `bfloat16`), so BF16 tensors
load and save as bfloat16, bit for bit, as F16 ones do as float16.
"""
import json
import math
import struct

import numpy as np

from ..dtypes import bfloat16
from ..tensor import Tensor

__all__ = ["encode", "write", "read", "read_metadata"]

# The reference implementation refuses headers above 100 MB; so do we, before reading one.
_MAX_HEADER_BYTES = 100_000_000
_DTYPES = {"BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
           "I16": np.dtype("<i2"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8"),
           "F16": np.dtype("<f2"), "BF16": bfloat16, "F32": np.dtype("<f4"),
           "F64": np.dtype("<f8")}
_NAMES = {dtype.newbyteorder("="): name for name, dtype in _DTYPES.items()}


def encode(obj, metadata=None):
    """(header bytes, arrays in file order) for the mapping `obj` of names to Tensors (or
    arrays); TypeError for anything a safetensors file cannot hold, before any file is
    touched."""
    if not isinstance(obj, dict):
        raise TypeError("a .safetensors file holds a flat mapping of names to tensors (a "
                        f"state dict), not a {type(obj).__name__}")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise TypeError("safetensors metadata must be a dict of str to str")
    arrays = {}
    for name, value in obj.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise TypeError(f"safetensors names must be strings other than '__metadata__', "
                            f"got {name!r}")
        array = value._array if isinstance(value, Tensor) else value
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name!r} is a {type(value).__name__}; a .safetensors file "
                            "holds only tensors")
        if array.dtype.newbyteorder("=") not in _NAMES:
            raise TypeError(f"{name!r} has dtype {array.dtype}, which safetensors cannot hold "
                            "as mpigrad reads it back")
        arrays[name] = array
    header, offset = {}, 0
    # Widest dtypes first, as the reference writer orders them, so every tensor starts at a
    # multiple of its own item size.
    order = sorted(arrays, key=lambda n: (-arrays[n].dtype.itemsize, n))
    for name in order:
        array = arrays[name]
        header[name] = {"dtype": _NAMES[array.dtype.newbyteorder("=")],
                        "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    if metadata:
        header = {"__metadata__": metadata, **header}
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the data section starts 8-byte aligned
    return encoded, [arrays[name] for name in order]


def write(encoded, file):
    """Write `encode`'s header and arrays to the open binary `file`."""
    header, arrays = encoded
    file.write(struct.pack("<Q", len(header)))
    file.write(header)
    for array in arrays:
        file.write(array.astype(array.dtype.newbyteorder("<"), order="C", copy=False).tobytes())


def read(file):
    """The mapping of names to Tensors stored in the open binary `file`."""
    header, data_start, _ = _read_header(file)
    tensors = {}
    for key, (dtype_name, shape, begin, end) in header.items():
        file.seek(data_start + begin)
        raw = file.read(end - begin)
        if len(raw) != end - begin:
            raise ValueError(f"the data of {key!r} is cut short")
        array = np.frombuffer(raw, _DTYPES[dtype_name]).astype(
            _DTYPES[dtype_name].newbyteorder("="))
        tensors[key] = Tensor(array.reshape(shape))
    return tensors


def read_metadata(file):
    """The `__metadata__` strings of the open binary `file` ({} when it has none)."""
    return _read_header(file)[2]


def _read_header(file):
    """(entries, offset of the data section, metadata), every entry checked against the file."""
    size = file.seek(0, 2)
    file.seek(0)
    prefix = file.read(8)
    if len(prefix) != 8:
        raise ValueError("shorter than the 8-byte header length")
    length, = struct.unpack("<Q", prefix)
    if length > _MAX_HEADER_BYTES or 8 + length > size:
        raise ValueError(f"its header claims {length} bytes; the file has {size}")
    try:
        parsed = json.loads(file.read(length).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"its header is not valid JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise ValueError("its header is not a JSON object")
    metadata = parsed.pop("__metadata__", None) or {}
    if not (isinstance(metadata, dict)
            and all(isinstance(v, str) for v in metadata.values())):
        raise ValueError("its __metadata__ is not a map of strings")
    entries = {key: _entry(key, value) for key, value in parsed.items()}
    data_size = size - 8 - length
    expected = 0
    for key, (_, _, begin, end) in sorted(entries.items(), key=lambda item: item[1][2:]):
        if begin != expected:
            raise ValueError(f"the data of {key!r} starts at byte {begin}, where {expected} "
                             "was expected (tensors must tile the data section)")
        expected = end
    if expected != data_size:
        raise ValueError(f"the tensors cover {expected} bytes of a {data_size}-byte data "
                         "section")
    return entries, 8 + length, metadata


def _entry(key, value):
    """(dtype name, shape, begin, end) of one header entry, or ValueError."""
    if not (isinstance(value, dict) and {"dtype", "shape", "data_offsets"} <= value.keys()):
        raise ValueError(f"the header entry of {key!r} is not a tensor description")
    dtype_name, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if dtype_name not in _DTYPES:
        raise ValueError(f"{key!r} has dtype {dtype_name!r}, which mpigrad cannot hold")
    if not (isinstance(shape, list)
            and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"{key!r} has shape {shape!r}: expected a list of non-negative ints")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(n) is int for n in offsets) and 0 <= offsets[0] <= offsets[1]):
        raise ValueError(f"{key!r} has data_offsets {offsets!r}")
    itemsize = _DTYPES[dtype_name].itemsize
    if offsets[1] - offsets[0] != math.prod(shape) * itemsize:
        raise ValueError(f"{key!r} spans {offsets[1] - offsets[0]} bytes, but shape {shape} "
                         f"of {dtype_name} needs {math.prod(shape) * itemsize}")
    return dtype_name, shape, offsets[0], offsets[1]
