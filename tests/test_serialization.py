"""mpigrad.serialization: round trips, atomic writes, and refusing bad or unsafe files."""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mpigrad import Tensor
from mpigrad.serialization import load, save


def test_round_trip_keeps_structure_types_and_values(tmp_path):
    weights = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    obj = {
        "model": {"w": weights, "b": Tensor(np.array(0.5))},
        0: ["list", ("tuple", 1), [], ()],
        1: {"nested": {-3: None}},
        "arrays": [np.arange(4, dtype=np.int16), np.ones((0, 3)), np.array([True, False]),
                   np.array([1 + 2j]), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                   np.arange(10)[::3]],
        "scalars": [np.float32(1.5), np.int64(-7), np.float64(0.25), 2**70, 1.0 / 3, -0.0, math.inf, "ünï",
                    True, False, None],
    }
    path = tmp_path / "ckpt"
    save(obj, path)
    back = load(path)

    assert set(back) == {"model", 0, 1, "arrays", "scalars"}
    w = back["model"]["w"]
    assert isinstance(w, Tensor) and w.dtype == np.float32 and w.shape == (2, 3)
    assert w.requires_grad and not back["model"]["b"].requires_grad
    np.testing.assert_array_equal(w.data, weights.data)
    assert w.data.flags.writeable  # usable as a parameter again
    assert back["model"]["b"].shape == () and back["model"]["b"].data == 0.5
    assert back[0] == ["list", ("tuple", 1), [], ()]
    assert isinstance(back[0][1], tuple) and isinstance(back[0][3], tuple)
    assert back[1] == {"nested": {-3: None}}
    for got, expected in zip(back["arrays"], obj["arrays"]):
        assert type(got) is np.ndarray and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    scalars = back["scalars"]
    assert type(scalars[0]) is np.float32 and scalars[0] == 1.5
    assert type(scalars[1]) is np.int64 and scalars[1] == -7
    assert type(scalars[2]) is np.float64 and scalars[2] == 0.25
    assert type(scalars[3]) is int and scalars[3] == 2**70
    assert type(scalars[4]) is float and scalars[4] == 1.0 / 3
    assert math.copysign(1, scalars[5]) == -1 and scalars[6] == math.inf
    assert scalars[7:] == ["ünï", True, False, None]
    assert [type(s) for s in scalars[8:10]] == [bool, bool]


def test_nan_survives(tmp_path):
    save({"loss": math.nan}, tmp_path / "c")
    assert math.isnan(load(tmp_path / "c")["loss"])


def test_a_tensor_saved_twice_comes_back_as_one_object(tmp_path):
    shared = Tensor(np.ones(3))
    save({"a": shared, "b": [shared], "c": Tensor(np.ones(3))}, tmp_path / "c")
    back = load(tmp_path / "c")
    assert back["a"] is back["b"][0]
    assert back["a"] is not back["c"]


def test_overwrites_an_existing_checkpoint_with_the_umask_permissions(tmp_path):
    path = tmp_path / "c"
    save({"epoch": 1}, path)
    old_umask = os.umask(0o022)
    try:
        save({"epoch": 2}, str(path))
    finally:
        os.umask(old_umask)
    assert load(path) == {"epoch": 2}
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert os.listdir(tmp_path) == ["c"]


@pytest.mark.parametrize("obj, error, message", [
    ({"a": [1, object()]}, TypeError, r"obj\['a'\]\[1\] of type object"),
    ({"s": {1, 2}}, TypeError, r"obj\['s'\] of type set"),
    ({1.5: "x"}, TypeError, "keys must be str or int.*1.5"),
    ([np.array([{}], dtype=object)], TypeError, r"obj\[0\]: its dtype object"),
])
def test_unsupported_objects_are_refused_before_writing(tmp_path, obj, error, message):
    with pytest.raises(error, match=message):
        save(obj, tmp_path / "c")
    assert os.listdir(tmp_path) == []


def _fail_on_second_array(monkeypatch):
    """Make numpy's array writer write half of the second array, then fail."""
    real_write = np.lib.format.write_array
    calls = []

    def write_array(fp, array, *args, **kwargs):
        calls.append(array.shape)
        if len(calls) == 2:
            fp.write(array.tobytes()[: array.nbytes // 2])
            raise OSError("disk full (simulated)")
        return real_write(fp, array, *args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_array)
    return calls


def test_a_failure_mid_write_keeps_the_old_checkpoint_and_leaves_no_temporary(
        tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    save({"w": np.zeros(1000), "epoch": 1}, path)
    calls = _fail_on_second_array(monkeypatch)
    with pytest.raises(OSError, match="simulated"):
        save({"w": np.ones(1000), "v": np.ones(1000), "epoch": 2}, path)
    assert len(calls) == 2
    monkeypatch.undo()
    back = load(path)
    assert back["epoch"] == 1 and not back["w"].any()
    assert os.listdir(tmp_path) == ["ckpt"]


def test_a_process_killed_mid_write_keeps_the_old_checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    save({"epoch": 1}, path)
    script = textwrap.dedent(f"""
        import os
        import numpy as np
        from mpigrad.serialization import save

        def write_array(fp, array, *args, **kwargs):
            fp.write(array.tobytes()[: array.nbytes // 2])
            fp.flush()
            os._exit(3)  # no cleanup, no finally: like a kill -9 or a node failure

        np.lib.format.write_array = write_array
        save({{"w": np.ones(100000), "epoch": 2}}, {str(path)!r})
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert load(path) == {"epoch": 1}
    leftovers = [name for name in os.listdir(tmp_path) if name != "ckpt"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".ckpt.")  # the hidden temporary


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nothing")


@pytest.mark.parametrize("content, message", [
    (b"", "not a valid mpigrad checkpoint"),
    (b"just some text, not a checkpoint", "not a valid mpigrad checkpoint"),
])
def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path, content, message):
    (tmp_path / "c").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load(tmp_path / "c")


def test_other_numpy_files_are_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(3))
    with pytest.raises(ValueError, match="single .npy array"):
        load(tmp_path / "a.npy")
    np.savez(tmp_path / "b.npz", w=np.arange(3))
    with pytest.raises(ValueError, match="without an mpigrad manifest"):
        load(tmp_path / "b.npz")


def test_a_truncated_checkpoint_is_refused(tmp_path):
    path = tmp_path / "c"
    save({"w": np.arange(1000.0)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a valid mpigrad checkpoint"):
        load(path)


def test_a_flipped_byte_in_an_array_is_detected(tmp_path):
    path = tmp_path / "c"
    save({"w": np.full(1000, 7.0)}, path)
    data = bytearray(path.read_bytes())
    position = data.index(np.full(8, 7.0).tobytes()) + 100
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="CRC"):
        load(path)


def _write_archive(path, manifest, **arrays):
    np.savez(path, manifest=np.frombuffer(manifest.encode(), dtype=np.uint8), **arrays)


@pytest.mark.parametrize("manifest, message", [
    ('{"format": "mpigrad.checkpoint", "version": 99, "root": 1}', "version 99"),
    ('{"format": "something else", "version": 1, "root": 1}', "not describe an mpigrad"),
    ('{"format": "mpigrad.checkpoint", "version": 1, "root": {"set": [1]}}',
     "unexpected manifest entry"),
    ('{"format": "mpigrad.checkpoint", "version": 1, "root": {"ndarray": 4}}',
     "missing array 4"),
    ('{"format": "mpigrad.checkpoint", "version": 1, "root": {"dict": [[1.5, 2]]}}',
     "malformed dict entry"),
    ('{"format": "mpigrad.checkpoint", "ver', "not a valid mpigrad checkpoint"),
])
def test_a_bad_manifest_is_refused(tmp_path, manifest, message):
    _write_archive(tmp_path / "c.npz", manifest)
    with pytest.raises(ValueError, match=message):
        load(tmp_path / "c.npz")


class _Payload:
    """Unpickling this would call _record_unpickling, which a safe loader never does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return _record_unpickling, (self.marker,)


def _record_unpickling(marker):
    with open(marker, "w") as file:
        file.write("code ran while loading")


def test_a_pickled_object_array_is_refused_without_running_code(tmp_path):
    marker = tmp_path / "marker"
    manifest = '{"format": "mpigrad.checkpoint", "version": 1, "root": {"ndarray": 0}}'
    _write_archive(tmp_path / "evil.npz", manifest,
                   a0=np.array([_Payload(str(marker))], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        load(tmp_path / "evil.npz")
    assert not marker.exists()
