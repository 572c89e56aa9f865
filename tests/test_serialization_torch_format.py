"""torch.save's format: state dicts cross between torch and mpigrad both ways, whole modules,
plain objects and numpy arrays round-trip, and weights_only=True (the default) refuses
what torch refuses, without running any of it."""
import io
import os
import pickle
import sys

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import serialization

torch = pytest.importorskip("torch")


def _buffer(save, obj):
    buffer = io.BytesIO()
    save(obj, buffer)
    buffer.seek(0)
    return buffer


def _assert_same(ours, theirs):
    assert ours.type() == theirs.type()
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.data, theirs.detach().numpy())


def _our_state():
    mg.manual_seed(0)
    model = mg.nn.Sequential(mg.nn.Linear(3, 4), mg.nn.BatchNorm1d(4), mg.nn.Linear(4, 2))
    state = model.state_dict()
    base = mg.arange(12, dtype=mg.float64).reshape(3, 4)
    state.update(transposed=base.t(), row=base[1], also_base=base,
                 mask=mg.tensor([True, False]), half=mg.ones(2, dtype=mg.half),
                 scalar=mg.tensor(7))
    return state


@pytest.mark.parametrize("target", ["file object", "model.pt", "model.pth"])
def test_our_state_dict_loads_in_torch_with_weights_only(tmp_path, target):
    state = _our_state()
    if target == "file object":
        source = _buffer(mg.save, state)
    else:
        source = tmp_path / target
        mg.save(state, source)
    theirs = torch.load(source, weights_only=True)
    assert list(theirs) == list(state)
    for name in state:
        _assert_same(state[name], theirs[name])
    # Views of one tensor stay views of one storage, as torch keeps them.
    assert theirs["row"].untyped_storage().data_ptr() == \
        theirs["also_base"].untyped_storage().data_ptr()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Linear(4, 2))
    model.load_state_dict({k: v for k, v in theirs.items() if k[0].isdigit()})


def test_torchs_state_dict_loads_here():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    base = torch.arange(10, dtype=torch.int64)
    obj = {"model": model.state_dict(), "weight": model[0].weight, "slice": base[2:5],
           "base": base, "transposed": torch.ones(2, 3).t(), "epoch": 3, "name": "x",
           "losses": [1.5, 2.5], "pair": (None, True), "blob": b"\x00\x01", "ids": {1, 2},
           "dtype": torch.float64, "device": torch.device("cpu"), "size": torch.Size([2, 3])}
    ours = mg.load(_buffer(torch.save, obj))
    for name, tensor in model.state_dict().items():
        _assert_same(ours["model"][name], tensor)
    assert type(ours["model"]).__name__ == "OrderedDict"
    assert isinstance(ours["weight"], mg.nn.Parameter) and ours["weight"].requires_grad
    for name in ("slice", "base", "transposed"):
        _assert_same(ours[name], obj[name])
    ours["base"].data[3] = 100  # the slice views the same storage, as in torch
    assert ours["slice"].data[1] == 100
    assert (ours["epoch"], ours["name"], ours["losses"], ours["pair"], ours["blob"],
            ours["ids"]) == (3, "x", [1.5, 2.5], (None, True), b"\x00\x01", {1, 2})
    assert ours["dtype"] == mg.float64 and ours["device"] == mg.device("cpu")
    assert tuple(ours["size"]) == (2, 3)


def test_a_state_dict_round_trips_here_and_loads_into_a_model(tmp_path):
    mg.manual_seed(0)
    model = mg.nn.Linear(3, 2)
    mg.save(model.state_dict(), tmp_path / "m.pt")
    other = mg.nn.Linear(3, 2)
    other.load_state_dict(mg.load(tmp_path / "m.pt"))
    np.testing.assert_array_equal(other.weight.data, model.weight.data)


def test_whole_modules_and_plain_objects_need_weights_only_false_as_in_torch(tmp_path):
    mg.manual_seed(0)
    model = mg.nn.Sequential(mg.nn.Linear(3, 4), mg.nn.ReLU(), mg.nn.Linear(4, 1))
    mg.save(model, tmp_path / "model.pt")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        mg.load(tmp_path / "model.pt")
    back = mg.load(tmp_path / "model.pt", weights_only=False)
    x = mg.randn(5, 3)
    np.testing.assert_array_equal(back(x).data, model(x).data)
    assert isinstance(back[0].weight, mg.nn.Parameter)
    # numpy arrays and plain objects, as torch.save pickles them
    obj = {"array": np.arange(6.0).reshape(2, 3), "numbers": np.float32(1.5),
           "config": {"lr": 0.1, "layers": (3, 4)}}
    with pytest.raises(pickle.UnpicklingError):
        torch.load(_buffer(torch.save, obj))
    with pytest.raises(pickle.UnpicklingError):
        mg.load(_buffer(mg.save, obj))
    for save in (mg.save, torch.save):
        back = mg.load(_buffer(save, obj), weights_only=False)
        np.testing.assert_array_equal(back["array"], obj["array"])
        assert back["numbers"] == obj["numbers"] and back["config"] == obj["config"]
        assert torch.load(_buffer(save, obj), weights_only=False)["config"] == obj["config"]


class _Marker:
    """A payload: unpickling it runs a shell command that creates a file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


@pytest.mark.parametrize("save", [mg.save, torch.save], ids=["ours", "torchs"])
def test_weights_only_refuses_a_payload_and_never_runs_it(tmp_path, save):
    marker = tmp_path / "payload-ran"
    evil = {"weight": mg.ones(2) if save is mg.save else torch.ones(2), "x": _Marker(marker)}
    for load in (mg.load, lambda f: mg.load(f, weights_only=True), torch.load):
        with pytest.raises(pickle.UnpicklingError, match="system"):
            load(_buffer(save, evil))
        assert not marker.exists()
    # The payload is real: trusting the file runs it.
    mg.load(_buffer(save, evil), weights_only=False)
    assert marker.exists()


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)


def test_safe_globals_allow_listed_types_only():
    buffer = _buffer(mg.save, {"p": Point(1, 2)})
    serialization.clear_safe_globals()
    with pytest.raises(pickle.UnpicklingError, match=f"{__name__}.Point"):
        mg.load(buffer)
    with serialization.safe_globals([Point]):
        assert serialization.get_safe_globals() == [Point]
        buffer.seek(0)
        assert mg.load(buffer) == {"p": Point(1, 2)}
    assert serialization.get_safe_globals() == []
    serialization.add_safe_globals([Point])
    try:
        buffer.seek(0)
        assert mg.load(buffer)["p"] == Point(1, 2)
        # torch's own list works the same way on the same file
        with torch.serialization.safe_globals([Point]):
            buffer.seek(0)
            assert torch.load(buffer)["p"] == Point(1, 2)
    finally:
        serialization.clear_safe_globals()
    # numpy arrays, once their reconstruction is allowed, as in torch
    numpy_names = [np.ndarray, np.dtype, type(np.dtype(np.float64)),
                   np._core.multiarray._reconstruct]
    with serialization.safe_globals(numpy_names):
        back = mg.load(_buffer(torch.save, {"a": np.arange(3.0)}))
    np.testing.assert_array_equal(back["a"], np.arange(3.0))


def test_pickle_module_and_weights_only_as_torch():
    buffer = _buffer(mg.save, {"w": mg.ones(2)})
    with pytest.raises(RuntimeError, match="pickle_module"):
        mg.load(buffer, pickle_module=pickle, weights_only=True)
    buffer.seek(0)
    np.testing.assert_array_equal(mg.load(buffer, pickle_module=pickle)["w"].data, [1, 1])


def test_other_paths_stay_mpigrads_pickle_free_checkpoint(tmp_path):
    mg.save({"w": mg.ones(2)}, tmp_path / "ckpt.npz")
    assert mg.load(tmp_path / "ckpt.npz")["w"].data.tolist() == [1, 1]
    with pytest.raises(TypeError, match=r"\.pt or \.pth"):
        mg.save(mg.nn.Linear(2, 2), tmp_path / "model.npz")
    assert not (tmp_path / "model.npz").exists()


def test_a_tensor_reaching_past_its_storage_is_refused():
    buffer = _buffer(torch.save, {"t": torch.arange(4)})
    ours = mg.load(buffer)
    assert ours["t"].data.tolist() == [0, 1, 2, 3]
    # Rewrite the pickle so the tensor claims 40 elements of its 4-element storage.
    import zipfile
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    name = next(n for n in members if n.endswith("data.pkl"))
    members[name] = members[name].replace(b"K\x04\x85", b"K(\x85", 1)
    forged = io.BytesIO()
    with zipfile.ZipFile(forged, "w") as archive:
        for n, payload in members.items():
            archive.writestr(n, payload)
    forged.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="past its storage"):
        mg.load(forged)
