"""mpigrad.serialization: round trips, atomic writes, and refusing bad or unsafe files."""

import errno
import fcntl
import hashlib
import io
import json
import math
import os
import re
import subprocess
import struct
import sys
import textwrap
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

from mpigrad import Tensor
from mpigrad.serialization import load, remove_stale_temporaries, save


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
    assert w._array.flags.writeable  # usable as a parameter again
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


def test_a_process_killed_mid_write_keeps_the_old_checkpoint_and_the_next_save_cleans_up(
        tmp_path):
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
    assert len(leftovers) == 1 and leftovers[0].startswith(".mpigrad-save.ckpt.")  # the temporary
    save({"epoch": 3}, tmp_path / "other")
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "other"]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    """A second process saving into the same directory must not delete the temporary of
    a writer that is still writing: it holds the lock."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from mpigrad.serialization import save

        real_write_array = np.lib.format.write_array

        def write_array(*args, **kwargs):
            np.lib.format.write_array = real_write_array
            print("writing", flush=True)
            sys.stdin.readline()
            return real_write_array(*args, **kwargs)

        np.lib.format.write_array = write_array
        save({{"w": np.arange(5.0)}}, {str(tmp_path / "slow")!r})
    """)
    writer = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "writing\n"
        (temporary,) = os.listdir(tmp_path)
        assert remove_stale_temporaries(tmp_path) == []
        save({"epoch": 1}, tmp_path / "fast")
        assert sorted(os.listdir(tmp_path)) == sorted([temporary, "fast"])
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    assert sorted(os.listdir(tmp_path)) == ["fast", "slow"]
    np.testing.assert_array_equal(load(tmp_path / "slow")["w"], np.arange(5.0))


def test_without_file_locks_saves_work_and_no_temporary_is_deleted(tmp_path, monkeypatch):
    """Where flock is not implemented (some parallel file systems), liveness cannot be
    proven, so stale temporaries stay; saving must still work."""
    stale = tmp_path / ".mpigrad-save.ckpt.0123456789ab.tmp"
    stale.write_bytes(b"left by a writer that may or may not be alive")

    def no_locks(descriptor, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    save({"epoch": 1}, tmp_path / "ckpt")
    assert load(tmp_path / "ckpt") == {"epoch": 1}
    assert sorted(os.listdir(tmp_path)) == [stale.name, "ckpt"]


def test_a_save_removes_only_its_own_dead_temporaries(tmp_path, monkeypatch):
    """Files that merely look like temporaries (another program's `.x.<12 hex>.tmp`, which
    save used to delete when unlocked) and dead temporaries of another user stay; a dead
    temporary of save's own goes."""
    others = [tmp_path / ".notes.0123456789ab.tmp", tmp_path / ".ckpt.ba9876543210.tmp"]
    for other in others:
        other.write_bytes(b"another program's work")
    own = tmp_path / ".mpigrad-save.ckpt.00112233aabb.tmp"
    own.write_bytes(b"left by a save that was killed")
    real_geteuid = os.geteuid
    monkeypatch.setattr(os, "geteuid", lambda: real_geteuid() + 1)
    assert remove_stale_temporaries(tmp_path) == []  # to another user, `own` is not theirs
    monkeypatch.undo()
    save({"epoch": 1}, tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path)) == sorted([other.name for other in others] + ["ckpt"])
    assert all(other.read_bytes() == b"another program's work" for other in others)


def test_kill_9_during_saves_leaves_the_last_complete_checkpoint_and_no_temporaries(tmp_path):
    """A writer saving checkpoint after checkpoint is killed with SIGKILL, three times; each
    run reports every checkpoint it finished. Afterwards every finished checkpoint loads
    whole, and the next save removes whatever temporaries the kills left."""
    script = textwrap.dedent(f"""
        import itertools, sys
        import numpy as np
        from mpigrad.serialization import save

        run = int(sys.argv[1])
        for step in itertools.count():
            save({{"run": run, "step": step, "w": np.full(250_000, float(step))}},
                 {str(tmp_path)!r} + f"/ckpt-{{run}}-{{step}}")
            print(step, flush=True)
    """)
    finished = []
    for run in range(3):
        writer = subprocess.Popen([sys.executable, "-c", script, str(run)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            steps = [int(writer.stdout.readline()) for _ in range(2)]
        finally:
            writer.kill()
            writer.wait(timeout=60)
        finished.append((run, steps[-1]))
    save({"done": True}, tmp_path / "after")
    names = os.listdir(tmp_path)
    assert not [name for name in names if name.endswith(".tmp")], names
    for run, step in finished:
        back = load(tmp_path / f"ckpt-{run}-{step}")
        assert (back["run"], back["step"]) == (run, step)
        np.testing.assert_array_equal(back["w"], np.full(250_000, float(step)))
    for name in names:  # whatever else finished before the kill is whole too
        load(tmp_path / name)


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


def test_a_flipped_bit_in_the_array_data_is_detected(tmp_path):
    path = tmp_path / "c"
    save({"w": np.full(1000, 7.0)}, path)
    data = bytearray(path.read_bytes())
    position = data.index(np.full(8, 7.0).tobytes()) + 100
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256 checksum does not match"):
        load(path)


def _small_checkpoint(path):
    save({"w": Tensor(np.arange(6, dtype=np.float32), requires_grad=True), "epoch": 3,
          "lr": np.float32(0.5)}, path)
    return path.read_bytes()


def _rewind_with(file, data):
    """`file` (a real file, open for update) holding `data` only, read from the start. The
    checks with thousands of cases load from one open file: opening the path for each write
    and each load was most of their time. A real file, not a BytesIO, so seeking behaves as
    it does for a path (a BytesIO clamps a seek before the start where a file raises)."""
    file.seek(0)
    file.truncate()
    file.write(data)
    file.seek(0)


def _assert_refused(file, data):
    _rewind_with(file, data)
    with pytest.raises(ValueError) as caught:  # nothing else: no zipfile or OS errors
        load(file)
    assert "the file object" in str(caught.value)


def test_every_truncation_of_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "c"
    whole = _small_checkpoint(path)
    path.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(ValueError, match=re.escape(str(path))):  # the error names the file
        load(path)
    with open(path, "r+b") as file:
        for length in range(len(whole)):
            _assert_refused(file, whole[:length])


def test_every_single_bit_flip_of_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "c"
    whole = _small_checkpoint(path)
    with open(path, "r+b") as file:
        for position in range(len(whole)):
            for bit in range(8):
                damaged = bytearray(whole)
                damaged[position] ^= 1 << bit
                _assert_refused(file, bytes(damaged))


def _legacy_checkpoint(path):
    """A version 1 checkpoint (np.savez, no checksum), as earlier mpigrad wrote them."""
    manifest = json.dumps({"format": "mpigrad.checkpoint", "version": 1, "root": {"dict": [
        ["w", {"tensor": 0, "requires_grad": True}], ["epoch", 3]]}})
    with open(path, "wb") as file:
        np.savez(file, manifest=np.frombuffer(manifest.encode(), dtype=np.uint8),
                 a0=np.arange(6, dtype=np.float32))
    return path.read_bytes()


def test_version_1_checkpoints_load_and_any_damage_is_an_error_or_harmless(tmp_path):
    """Without a checksum, zip's CRC-32 and the member checks are what stands between a
    damaged file and wrong numbers: a flip either raises ValueError or hit a byte zip does
    not use (a timestamp, a version field), never changes what is loaded."""
    path = tmp_path / "c"
    whole = _legacy_checkpoint(path)
    back = load(path)
    assert back["epoch"] == 3 and back["w"].requires_grad
    np.testing.assert_array_equal(back["w"].data, np.arange(6, dtype=np.float32))
    with open(path, "r+b") as file:
        for position in range(len(whole)):  # one bit of every byte, a different one each time
            damaged = bytearray(whole)
            damaged[position] ^= 1 << position % 8
            _rewind_with(file, bytes(damaged))
            try:
                back = load(file)
            except ValueError:
                continue
            assert back["epoch"] == 3
            np.testing.assert_array_equal(back["w"].data, np.arange(6, dtype=np.float32))


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


def _npy(descr, shape, data=b""):
    """A raw .npy member with any header, even one numpy would never write."""
    stream = io.BytesIO()
    np.lib.format.write_array_header_1_0(stream, {"descr": descr, "fortran_order": False,
                                                  "shape": shape})
    return stream.getvalue() + data


def _archive_with_member(path, member, root='{"ndarray": 0}'):
    manifest = f'{{"format": "mpigrad.checkpoint", "version": 1, "root": {root}}}'
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("manifest.npy", _npy("|u1", (len(manifest),), manifest.encode()))
        archive.writestr("a0.npy", member)


@pytest.mark.parametrize("member, message", [
    (_npy("<f8", (2**64,)), "bytes of data for an array of shape"),
    (_npy("<f8", (2**32, 2**32), bytes(8)), "bytes of data for an array of shape"),
    (_npy("|V8", (1,), bytes(8)), "not a numeric or bool dtype"),
    (_npy("<M8[s]", (1,), bytes(8)), "not a numeric or bool dtype"),
    (_npy("<m8[s]", (1,), bytes(8)), "not a numeric or bool dtype"),
    (_npy("<U2", (1,), bytes(8)), "not a numeric or bool dtype"),
    (_npy("|S8", (1,), bytes(8)), "not a numeric or bool dtype"),
])
def test_hostile_array_members_are_value_errors(tmp_path, member, message):
    path = tmp_path / "c.npz"
    _archive_with_member(path, member)
    with pytest.raises(ValueError, match=message) as caught:
        load(path)
    assert str(path) in str(caught.value)


def test_a_big_endian_member_loads_in_native_byte_order(tmp_path):
    path = tmp_path / "c.npz"
    _archive_with_member(path, _npy(">f8", (3,), np.arange(3.0).astype(">f8").tobytes()))
    back = load(path)
    assert back.dtype == np.float64 and back.dtype.isnative
    np.testing.assert_array_equal(back, np.arange(3.0))


def test_an_integer_tensor_that_claims_to_require_grad_is_refused(tmp_path):
    path = tmp_path / "c.npz"
    _archive_with_member(path, _npy("<i8", (2,), bytes(16)),
                         root='{"tensor": 0, "requires_grad": true}')
    with pytest.raises(ValueError, match="requires_grad"):
        load(path)


def test_nesting_deeper_than_python_recurses_is_a_value_error(tmp_path):
    depth = 100_000
    manifest = ('{"format": "mpigrad.checkpoint", "version": 1, "root": '
                + '{"list": [' * depth + "]}" * depth + "}")
    _write_archive(tmp_path / "c.npz", manifest)
    with pytest.raises(ValueError, match="not a valid mpigrad checkpoint"):
        load(tmp_path / "c.npz")


def test_saving_a_dtype_with_no_tensor_meaning_is_refused(tmp_path):
    with pytest.raises(TypeError, match="not a numeric or bool dtype"):
        save({"when": np.array(["2026-01-01"], dtype="datetime64[D]")}, tmp_path / "c")
    assert list(tmp_path.iterdir()) == []


def test_members_are_found_without_listing_the_archive_per_member(tmp_path, monkeypatch):
    """Looking members up in zipfile's fresh namelist() per member made loading 8,000
    members take 1.6 s (quadratic); one listing per load keeps it linear."""
    path = tmp_path / "c"
    save({f"p{i}": np.zeros(1) for i in range(300)}, path)
    calls = []
    real = zipfile.ZipFile.namelist
    monkeypatch.setattr(zipfile.ZipFile, "namelist",
                        lambda self: calls.append(1) or real(self))
    assert len(load(path)) == 300
    assert len(calls) <= 2


def test_a_fifo_wearing_a_temporarys_name_does_not_block_a_save(tmp_path):
    """The clean-up of dead writers' temporaries must not open a FIFO for reading (that
    waits for a writer forever) nor delete anything that is not a regular file."""
    fifo = tmp_path / ".mpigrad-save.ckpt.0123456789ab.tmp"
    os.mkfifo(fifo)
    link = tmp_path / ".mpigrad-save.ckpt.ba9876543210.tmp"
    os.symlink(tmp_path / "target", link)
    (tmp_path / "target").write_bytes(b"keep")
    script = f"from mpigrad.serialization import save; save({{'epoch': 1}}, {str(tmp_path / 'ckpt')!r})"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert load(tmp_path / "ckpt") == {"epoch": 1}
    assert fifo.exists() and link.is_symlink() and (tmp_path / "target").read_bytes() == b"keep"


def _with_checksum(data):
    """`data` with its SHA-256 trailer recomputed, so the parser behind the checksum sees
    the damage (a hostile file comes with a matching checksum)."""
    tag = b"mpigrad-sha256:"
    cut = len(data) - len(tag) - 64
    if cut < 0 or data[cut:cut + len(tag)] != tag:
        return data
    return data[:cut] + tag + hashlib.sha256(data[:cut]).hexdigest().encode()


def test_fuzzed_checkpoints_give_only_value_errors_in_bounded_memory(tmp_path):
    """Seeded random truncations, bit flips, byte insertions and header edits of a real
    checkpoint, most with a recomputed checksum: loading returns or raises ValueError,
    nothing else, and never allocates far beyond the file's size."""
    path = tmp_path / "c"
    save({"model": {"w": Tensor(np.arange(12.0).reshape(3, 4), requires_grad=True),
                    "n": np.arange(4, dtype=np.int32)}, "epoch": 3, "tags": ("a", None, 1.5)},
         path)
    whole = path.read_bytes()
    digits = [m.start() for m in re.finditer(rb"[0-9]", whole[:-80])]
    rng = np.random.default_rng(0)
    tracemalloc.start()
    outcomes = {"loaded": 0, "refused": 0}
    file = open(path, "r+b")
    try:
        for case in range(3000):
            data = bytearray(whole)
            kind = case % 4
            if kind == 0:
                data = data[:rng.integers(0, len(data))]
            elif kind == 1:
                for position in rng.integers(0, len(data), rng.integers(1, 5)):
                    data[position] ^= 1 << int(rng.integers(0, 8))
            elif kind == 2:
                position = int(rng.integers(0, len(data)))
                data[position:position] = rng.bytes(int(rng.integers(1, 9)))
            else:  # a number in a header or the manifest becomes another, maybe huge
                position = digits[rng.integers(0, len(digits))]
                data[position:position + 1] = str(int(rng.integers(0, 10)) * 10
                                                   ** int(rng.integers(0, 25))).encode()
            data = bytes(data)
            if case % 5:
                data = _with_checksum(data)
            _rewind_with(file, data)
            try:
                load(file)
                outcomes["loaded"] += 1
            except ValueError as error:
                assert "the file object" in str(error)
                outcomes["refused"] += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        file.close()
        tracemalloc.stop()
    assert outcomes["refused"] > 2000, outcomes
    assert peak < 4 * 2**20, peak


def _stored_member(name, data, offset):
    """A zip local header and `data` stored under `name`, and its central directory entry for
    a local header at `offset`."""
    name = name.encode()
    fields = (0, 0, 0, 0x21, zlib.crc32(data), len(data), len(data), len(name))
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, *fields, 0) + name + data
    central = (struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, *fields, 0, 0, 0, 0, 0,
                           offset) + name)
    return local, central


def _overlapping_checkpoint(path, count, payload):
    """A version 1 checkpoint whose `count` members nest: each member's data is a uint8 array
    holding the next member whole, header and all, so the members' sizes add up to about
    `count` times the file's (the zip bomb shape of overlapping entries)."""
    locals_ = []  # innermost first: a{count-1}'s local header and data, then the ones holding it
    for index in reversed(range(count)):
        inner = locals_[-1] if locals_ else payload
        locals_.append(_stored_member(f"a{index}.npy", _npy("|u1", (len(inner),), inner), 0)[0])
    locals_.reverse()
    root = json.dumps({"list": [{"ndarray": index} for index in range(count)]})
    manifest = f'{{"format": "mpigrad.checkpoint", "version": 1, "root": {root}}}'.encode()
    body, central = _stored_member("manifest.npy", _npy("|u1", (len(manifest),), manifest), 0)
    offset = len(body)
    for index, local in enumerate(locals_):
        central += _stored_member(f"a{index}.npy", local[30 + len(f"a{index}.npy"):], offset)[1]
        if index + 1 < count:
            offset += len(local) - len(locals_[index + 1])
    body += locals_[0]
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count + 1, count + 1, len(central),
                      len(body), 0)
    path.write_bytes(body + central + end)


def test_members_that_overlap_are_refused_before_any_is_read(tmp_path, monkeypatch):
    """Overlapping members made a 1 MiB checkpoint cost 141 MiB to load; members whose sizes
    add up to more than the file are refused, naming it, before zipfile reads one."""
    path = tmp_path / "nested.ckpt"
    _overlapping_checkpoint(path, count=8, payload=np.arange(4096, dtype=np.uint8).tobytes())
    with zipfile.ZipFile(path) as archive:  # a well-formed archive: each member reads whole
        sizes = [len(archive.read(name)) for name in archive.namelist()]
    assert sum(sizes) > 4 * path.stat().st_size
    reads = []
    real_read = zipfile.ZipFile.read
    monkeypatch.setattr(zipfile.ZipFile, "read",
                        lambda self, name, pwd=None: reads.append(name) or real_read(self, name))
    with pytest.raises(ValueError, match="members claim .* bytes in all in a file of") as caught:
        load(path)
    assert str(path) in str(caught.value) and reads == []
