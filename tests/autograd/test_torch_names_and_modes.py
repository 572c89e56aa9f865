"""grad_fn names and classes as torch's for the common ops, and set_detect_anomaly as a
context manager restoring the mode from before."""
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def _graphs(lib):
    x = lib.ones(2, 3, requires_grad=True)
    w = lib.ones(4, 3, requires_grad=True)
    return {
        "add": x + x, "sub": x - 1, "mul": x * x, "div": x / 2, "neg": -x, "pow": x ** 2,
        "mm": x @ w.t(), "linear": lib.nn.Linear(3, 4)(x),
        "linear_no_bias": lib.nn.Linear(3, 4, bias=False)(x), "sum": x.sum(),
        "sum_dim": x.sum(1), "mean": x.mean(), "exp": x.exp(), "log": x.log(),
        "tanh": x.tanh(), "relu": lib.relu(x), "sigmoid": lib.sigmoid(x), "view": x.view(6),
        "permute": x.permute(1, 0), "select": x[0], "softmax": x.softmax(-1),
        "log_softmax": x.log_softmax(-1), "cat": lib.cat([x, x]), "clone": x.clone(),
        "expand": x[:1].expand(2, 3), "remainder": x % 2,
    }


def test_grad_fn_names_and_classes_are_torchs():
    ours, theirs = _graphs(mg), _graphs(torch)
    for key, tensor in ours.items():
        expected = type(theirs[key].grad_fn).__name__
        assert (type(tensor.grad_fn).__name__, tensor.grad_fn.name()) == (expected, expected), key
        assert f"grad_fn=<{expected}>" in repr(tensor)


def test_set_detect_anomaly_restores_the_previous_mode_after_a_block():
    for lib in (mg, torch):
        assert not lib.is_anomaly_enabled()
        with lib.autograd.set_detect_anomaly(True):
            assert lib.is_anomaly_enabled()
            with lib.autograd.set_detect_anomaly(False):
                assert not lib.is_anomaly_enabled()
            assert lib.is_anomaly_enabled()
        assert not lib.is_anomaly_enabled()
        lib.autograd.set_detect_anomaly(True)  # as a plain call it stays set
        assert lib.is_anomaly_enabled()
        lib.autograd.set_detect_anomaly(False)
        assert not lib.is_anomaly_enabled()


def test_inference_tensors_and_their_errors_are_torchs():
    results = []
    for lib in (mg, torch):
        w = lib.ones(3, requires_grad=True)
        with lib.inference_mode():
            x = lib.ones(3) * 2
            x.add_(1)  # in place inside inference mode: allowed
        outcome = [x.is_inference(), lib.ones(1).is_inference(), (x + 1).is_inference()]
        normal = x.clone()  # (torch writes before refusing an in-place update: clone first)
        for attempt in (lambda: w * x, lambda: x.add_(1), lambda: x.mul_(2)):
            with pytest.raises(RuntimeError) as error:
                attempt()
            outcome.append(str(error.value).split(".")[0])
        outcome += [normal.is_inference(), float((w * normal).sum())]
        with lib.no_grad():
            with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
                x.zero_()
        results.append(outcome)
    assert results[0] == results[1]
    assert results[0][:3] == [True, False, False]
