import gzip

import numpy as np
import pytest

from mpigrad.data import read_idx, write_idx


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "float32", "float64"])
def test_round_trip_keeps_values_shape_and_dtype(tmp_path, dtype, suffix):
    array = (np.arange(2 * 3 * 5) - 7).astype(dtype).reshape(2, 3, 5)
    path = tmp_path / f"array-idx3{suffix}"
    write_idx(path, array)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, array)


def test_header_is_big_endian_as_in_the_mnist_files(tmp_path):
    path = tmp_path / "labels-idx1-ubyte"
    write_idx(path, np.array([7, 2, 1], np.uint8))
    assert path.read_bytes() == bytes([0, 0, 0x08, 1, 0, 0, 0, 3, 7, 2, 1])


def test_gz_file_is_really_gzipped(tmp_path):
    path = tmp_path / "x-idx1-ubyte.gz"
    write_idx(path, np.array([1, 2], np.uint8))
    assert gzip.decompress(path.read_bytes()) == bytes([0, 0, 8, 1, 0, 0, 0, 2, 1, 2])


def test_zero_length_and_scalar_arrays_round_trip(tmp_path):
    write_idx(tmp_path / "empty", np.zeros((0, 28, 28), np.uint8))
    assert read_idx(tmp_path / "empty").shape == (0, 28, 28)
    write_idx(tmp_path / "scalar", np.float64(2.5))
    assert read_idx(tmp_path / "scalar") == 2.5


def test_write_rejects_a_dtype_idx_cannot_store(tmp_path):
    with pytest.raises(TypeError, match="int64"):
        write_idx(tmp_path / "x", np.arange(3))


def _corrupt(tmp_path, data):
    path = tmp_path / "bad-idx"
    path.write_bytes(data)
    return path


GOOD = bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(6))


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00\x00", "at least 4 bytes"),
        (b"\x01" + GOOD[1:], "two zero bytes"),
        (GOOD[:2] + b"\x0a" + GOOD[3:], "unknown IDX type code 0x0A"),
        (GOOD[:10], "truncated header"),
        (GOOD[:-1], r"truncated: header says shape \(2, 3\)"),
        (GOOD + b"\x00", "trailing bytes"),
    ],
)
def test_malformed_files_raise_naming_the_file_and_the_expectation(tmp_path, data, message):
    path = _corrupt(tmp_path, data)
    with pytest.raises(ValueError, match=message) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_well_formed_reference_bytes_parse(tmp_path):
    np.testing.assert_array_equal(read_idx(_corrupt(tmp_path, GOOD)), np.arange(6).reshape(2, 3))


def test_gz_name_on_plain_data_is_reported(tmp_path):
    path = tmp_path / "plain.gz"
    path.write_bytes(GOOD)
    with pytest.raises(ValueError, match="not intact gzip"):
        read_idx(path)


def test_truncated_gzip_stream_is_reported(tmp_path):
    path = tmp_path / "cut-idx.gz"
    path.write_bytes(gzip.compress(GOOD)[:-6])
    with pytest.raises(ValueError, match="not intact gzip") as info:
        read_idx(path)
    assert str(path) in str(info.value)
