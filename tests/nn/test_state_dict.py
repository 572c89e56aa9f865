"""Module state: save -> load gives identical outputs; strict loading names bad keys."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn


def _model(seed):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 5))


def test_save_then_load_gives_identical_outputs(tmp_path):
    model = _model(0)
    x = mg.randn(3, 1, 6, 6)
    model(x)  # one training-mode pass moves the BatchNorm running statistics
    model.eval()
    expected = model(x).detach().numpy()
    mg.save(model.state_dict(), tmp_path / "model.npz")

    restored = _model(1).eval()
    assert not np.array_equal(restored(x).detach().numpy(), expected)
    restored.load_state_dict(mg.load(tmp_path / "model.npz"))
    np.testing.assert_array_equal(restored(x).detach().numpy(), expected)
    assert restored[1].num_batches_tracked.item() == 1


def test_strict_loading_names_missing_extra_and_misshaped_keys():
    model = _model(0)
    state = model.state_dict()
    del state["4.bias"]
    state["4.extra"] = mg.zeros(2)
    state["0.weight"] = mg.zeros(4, 1, 5, 5)
    with pytest.raises(RuntimeError) as error:
        model.load_state_dict(state)
    message = str(error.value)
    assert "Missing key(s) in state_dict: 4.bias" in message
    assert "Unexpected key(s) in state_dict: 4.extra" in message
    assert "size mismatch for 0.weight" in message and "(4, 1, 5, 5)" in message


def test_non_strict_loading_reports_what_it_skipped():
    model = _model(0)
    state = model.state_dict()
    del state["4.bias"]
    result = model.load_state_dict(state, strict=False)
    assert result.missing_keys == ["4.bias"] and result.unexpected_keys == []


def test_a_tensor_assigned_to_a_buffers_name_stays_a_buffer_as_in_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = mg.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    ours.running_mean = mg.ones(3)
    theirs.running_mean = torch.ones(3)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert np.array_equal(ours.state_dict()["running_mean"].numpy(), np.ones(3))
    ours.running_var = None
    theirs.running_var = None
    assert list(ours.state_dict()) == list(theirs.state_dict())
