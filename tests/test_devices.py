"""Device-selection preambles and torch.load's arguments work unchanged and say "CPU only"."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("args", [("cpu",), ("cuda",), ("cuda:1",), ("cuda", 1), ("mps",),
                                  ("cpu", 0)])
def test_device_values_match_torch(args):
    ours, theirs = mg.device(*args), torch.device(*args)
    assert (str(ours), repr(ours), ours.type, ours.index) == \
        (str(theirs), repr(theirs), theirs.type, theirs.index)
    assert ours == mg.device(ours) and hash(ours) == hash(mg.device(*args))
    assert (ours == "cpu") is (theirs == "cpu")


@pytest.mark.parametrize("args, error", [(("gpu",), RuntimeError), (("cuda:x",), RuntimeError),
                                         ((0,), RuntimeError), ((-1,), RuntimeError),
                                         (("cuda:1", 1), RuntimeError)])
def test_bad_devices_raise_torchs_error_types(args, error):
    with pytest.raises(error):
        torch.device(*args)
    with pytest.raises(error):
        mg.device(*args)


def test_preambles_choose_the_cpu():
    assert mg.cuda.is_available() is torch.cuda.is_available() is False
    assert mg.cuda.device_count() == torch.cuda.device_count() == 0
    assert mg.accelerator.is_available() is torch.accelerator.is_available() is False
    assert mg.accelerator.current_accelerator() is torch.accelerator.current_accelerator() is None
    assert mg.backends.mps.is_available() is torch.backends.mps.is_available() is False
    use_accel = mg.accelerator.is_available()
    device = mg.accelerator.current_accelerator() if use_accel else mg.device("cpu")
    assert device == mg.device("cpu")
    device = mg.device("cuda" if mg.cuda.is_available() else "cpu")
    assert str(device) == "cpu"
    mg.cuda.manual_seed(1)
    mg.cuda.manual_seed_all(1)
    mg.backends.cudnn.benchmark = True
    with pytest.raises(AssertionError, match="CPU only"):
        mg.cuda.current_device()
    with pytest.raises(RuntimeError, match="none is available"):
        mg.accelerator.current_device_index()


def test_load_accepts_torchs_arguments(tmp_path):
    path = tmp_path / "model.npz"
    mg.save({"w": mg.ones(2)}, path)
    for kwargs in (dict(map_location="cpu", weights_only=True),
                   dict(map_location=mg.device("cpu")), dict(map_location={"cuda:0": "cpu"}),
                   dict(map_location=lambda storage, location: storage, weights_only=False),
                   dict(mmap=True)):
        np.testing.assert_array_equal(mg.load(path, **kwargs)["w"].data, [1, 1])
    with pytest.raises(RuntimeError, match="CPU only"):
        mg.load(path, map_location="cuda:0")
    with pytest.raises(TypeError, match="never unpickles"):
        import pickle
        mg.load(path, pickle_module=pickle)
