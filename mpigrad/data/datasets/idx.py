"""The IDX file format used by MNIST and its relatives (Fashion-MNIST, KMNIST).

An IDX file is a 4-byte magic number `00 00 <type code> <ndim>`, then `ndim`
big-endian uint32 dimension sizes, then the array in C order, big-endian.
Files whose name ends in `.gz` are read and written through gzip.
"""
import gzip
import os
import zlib

import numpy as np

_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {dtype.newbyteorder("="): code for code, dtype in _DTYPES.items()}


def _open(path, mode):
    return gzip.open(path, mode) if os.fspath(path).endswith(".gz") else open(path, mode)


def read_idx(path):
    """Read an IDX file (plain, or gzipped if `path` ends in `.gz`) into a
    native-endian numpy array with the file's shape and element type.

    Raises `ValueError` naming the file if the magic number, type code or
    size does not match what the header promises.
    """
    try:
        with _open(path, "rb") as f:
            raw = f.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise ValueError(
            f"{path}: name ends in .gz but the file is not intact gzip data ({e})"
        ) from None
    if len(raw) < 4:
        raise ValueError(f"{path}: expected an IDX file of at least 4 bytes, got {len(raw)}")
    zero0, zero1, code, ndim = raw[:4]
    if zero0 != 0 or zero1 != 0:
        raise ValueError(
            f"{path}: not an IDX file: the magic number must start with two zero bytes, "
            f"got {raw[:4].hex(' ')}"
        )
    if code not in _DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _DTYPES)
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02X}, expected one of {known}")
    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise ValueError(
            f"{path}: truncated header: {ndim} dimensions need {header_size} bytes, "
            f"file has {len(raw)}"
        )
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = _DTYPES[code]
    expected = header_size + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        problem = "truncated" if len(raw) < expected else "has trailing bytes"
        raise ValueError(
            f"{path}: {problem}: header says shape {shape} of {dtype.name}, "
            f"which is {expected} bytes in all, but the file has {len(raw)}"
        )
    data = np.frombuffer(raw, dtype, offset=header_size).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def write_idx(path, array):
    """Write `array` to `path` in IDX format, gzipped if `path` ends in `.gz`.

    Supported element types are those IDX can describe: uint8, int8, int16,
    int32, float32 and float64.
    """
    array = np.asarray(array)
    code = _CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        names = ", ".join(d.name for d in _CODES)
        raise TypeError(f"IDX cannot store dtype {array.dtype}; expected one of {names}")
    if array.ndim > 255:
        raise ValueError(f"IDX stores at most 255 dimensions, got {array.ndim}")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    with _open(path, "wb") as f:
        f.write(header)
        f.write(np.ascontiguousarray(array, dtype=_DTYPES[code]).tobytes())
