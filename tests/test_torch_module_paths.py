"""The modules PyTorch scripts import at their top exist at torch's paths and answer as
torch's CPU build: backends flags, onnx, hub (file:// downloads into a cache), the
utils.data and nn.modules paths."""
import hashlib
import importlib
import io
import urllib.error

import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def test_backend_flags_have_torchs_defaults_and_are_settable():
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction",
                 "allow_bf16_reduced_precision_reduction"):
        assert getattr(mg.backends.cuda.matmul, name) == getattr(torch.backends.cuda.matmul, name)
    # (benchmark and deterministic are set by other tests of the session; allow_tf32 is new)
    assert mg.backends.cudnn.allow_tf32 is torch.backends.cudnn.allow_tf32 is True
    assert mg.backends.cuda.is_built() is torch.backends.cuda.is_built() is False
    assert mg.backends.cuda.flash_sdp_enabled() == torch.backends.cuda.flash_sdp_enabled()
    try:
        mg.backends.cuda.matmul.allow_tf32 = True
        mg.backends.cudnn.allow_tf32 = False
        mg.backends.cuda.enable_flash_sdp(False)
        assert mg.backends.cuda.matmul.allow_tf32 is True and not mg.backends.cudnn.allow_tf32
        assert mg.backends.cuda.flash_sdp_enabled() is False
    finally:
        mg.backends.cuda.matmul.allow_tf32 = False
        mg.backends.cudnn.allow_tf32 = True
        mg.backends.cuda.enable_flash_sdp(True)
    for module in (mg, torch):
        with pytest.raises(AttributeError):
            module.backends.cuda.matmul.allow_tf33 = True
        with pytest.raises(RuntimeError):
            module.backends.cuda.matmul.allow_tf32 = "yes"


def test_float32_matmul_precision_is_kept_and_checked_as_torchs():
    """Found by tests/programs/gpt.py, which sets it as GPT trainers do. It changes no result:
    torch's CPU matmul is full float32 under 'high' too."""
    assert mg.get_float32_matmul_precision() == "highest"
    x = mg.tensor(np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32))
    before = (x @ x.T).numpy()
    try:
        for precision in ("high", "medium", "highest"):
            mg.set_float32_matmul_precision(precision)
            assert mg.get_float32_matmul_precision() == precision
            assert mg.backends.cuda.matmul.allow_tf32 is (precision != "highest")
            np.testing.assert_array_equal((x @ x.T).numpy(), before)
        mg.set_float32_matmul_precision("high")
        with pytest.warns(UserWarning, match="low is not one of 'highest', 'high', or 'medium'"):
            mg.set_float32_matmul_precision("low")
        assert mg.get_float32_matmul_precision() == "high"
        for module in (mg, torch):  # the type is checked before anything changes
            with pytest.raises(RuntimeError, match="expects a str, but got int"):
                module.set_float32_matmul_precision(3)
    finally:
        mg.set_float32_matmul_precision("highest")


def test_onnx_imports_and_export_says_it_cannot():
    import mpigrad.onnx
    assert mpigrad.onnx.is_in_onnx_export() is torch.onnx.is_in_onnx_export() is False
    with pytest.raises(NotImplementedError, match="torch.onnx.export"):
        mpigrad.onnx.export(mg.nn.Linear(2, 2), (mg.ones(1, 2),), "model.onnx")


def test_hub_dir_follows_torch_home_as_torchs(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    assert mg.hub.get_dir() == torch.hub.get_dir() == str(tmp_path / "home" / "hub")
    monkeypatch.delenv("TORCH_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert mg.hub.get_dir() == torch.hub.get_dir()


def test_load_state_dict_from_a_file_url_with_its_hash(tmp_path, capsys):
    torch.manual_seed(0)
    state = torch.nn.Linear(3, 2).state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    source = tmp_path / "served" / f"linear-{digest[:8]}.pth"
    source.parent.mkdir()
    source.write_bytes(buffer.getvalue())
    url = source.as_uri()
    cache = tmp_path / "cache"
    ours = mg.hub.load_state_dict_from_url(url, model_dir=str(cache), check_hash=True)
    theirs = torch.hub.load_state_dict_from_url(url, model_dir=str(tmp_path / "tcache"),
                                                check_hash=True)
    assert "Downloading" in capsys.readouterr().out
    for name in theirs:
        np.testing.assert_array_equal(ours[name].data, theirs[name].numpy())
    source.unlink()  # the cached copy is used from now on
    again = mg.hub.load_state_dict_from_url(url, model_dir=str(cache))
    np.testing.assert_array_equal(again["weight"].data, ours["weight"].data)
    # a file whose content does not match the hash in its name is refused and not kept
    bad = tmp_path / "served" / "linear-00000000.pth"
    bad.write_bytes(buffer.getvalue())
    with pytest.raises(RuntimeError, match="invalid hash"):
        mg.hub.load_state_dict_from_url(bad.as_uri(), model_dir=str(cache), check_hash=True)
    assert not (cache / bad.name).exists()
    assert sorted(p.name for p in cache.iterdir()) == [source.name]


def test_an_unreachable_server_is_a_clear_url_error(tmp_path):
    with pytest.raises(urllib.error.URLError, match="cannot download .*put it at"):
        mg.hub.download_url_to_file("http://127.0.0.1:9/weights.pth", str(tmp_path / "w.pth"))
    assert list(tmp_path.iterdir()) == []


def test_utils_data_module_paths():
    from mpigrad.utils.data.dataloader import DataLoader, default_collate
    from mpigrad.utils.data.dataset import Dataset
    from mpigrad.utils.data.sampler import RandomSampler
    assert (DataLoader, default_collate, Dataset, RandomSampler) == \
        (mg.data.DataLoader, mg.data.default_collate, mg.data.Dataset, mg.data.RandomSampler)


SUBMODULES = ["activation", "batchnorm", "container", "conv", "distance", "dropout", "flatten",
              "fold", "instancenorm", "linear", "loss", "module", "normalization", "padding",
              "pixelshuffle", "pooling", "rnn", "sparse", "transformer", "upsampling"]


@pytest.mark.parametrize("sub", SUBMODULES)
def test_nn_modules_paths_name_torchs_classes(sub):
    ours = importlib.import_module(f"mpigrad.nn.modules.{sub}")
    theirs = importlib.import_module(f"torch.nn.modules.{sub}")
    names = [n for n, v in vars(ours).items() if isinstance(v, type)]
    assert names
    for name in names:
        assert getattr(ours, name) is getattr(mg.nn, name)
        assert isinstance(getattr(theirs, name), type), f"torch.nn.modules.{sub} has no {name}"
    assert mg.nn.modules.linear.Linear is mg.nn.Linear


def test_a_whole_torch_model_loads_as_mpigrads_when_trusted():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    ours = mg.load(buffer, weights_only=False)
    assert isinstance(ours[0], mg.nn.Linear) and isinstance(ours, mg.nn.Sequential)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(ours(mg.tensor(x)).data,
                               model(torch.tensor(x)).detach().numpy(), rtol=1e-6)
