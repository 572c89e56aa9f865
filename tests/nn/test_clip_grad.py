"""torch.nn.utils' clipping and parameter-vector helpers against torch, and the attribute
paths a torch script reaches through after a bare import."""
import subprocess
import sys

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.nn.utils import (clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_,
                              get_total_norm, parameters_to_vector, vector_to_parameters)

torch = pytest.importorskip("torch")


def _pair(dtype=np.float64, scale=1.0, seed=0):
    """The same parameters with the same gradients in both libraries (one without a grad)."""
    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (4,), (2, 2, 2), (5,)]
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [rng.standard_normal(s).astype(dtype) * scale for s in shapes]
    ours = [mg.tensor(v, requires_grad=True) for v in values]
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    for i, g in enumerate(grads[:-1]):
        ours[i].grad = mg.tensor(g)
        theirs[i].grad = torch.tensor(g)
    return ours, theirs


def _assert_grads_equal(ours, theirs, rtol):
    for o, t in zip(ours, theirs):
        assert (o.grad is None) == (t.grad is None)
        if o.grad is not None:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=0)


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, "inf", float("inf"), 0.5])
@pytest.mark.parametrize("max_norm,scale", [(0.5, 1.0), (100.0, 1.0), (1.0, 1e-3)])
def test_clip_grad_norm_matches_torch(norm_type, max_norm, scale):
    ours, theirs = _pair(scale=scale)
    total = clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert isinstance(total, mg.Tensor) and total.shape == () and total.dtype == np.float64
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-12)
    _assert_grads_equal(ours, theirs, rtol=1e-12)


def test_clip_grad_norm_in_float32_is_torchs_to_rounding():
    ours, theirs = _pair(dtype=np.float32, scale=10.0)
    total = clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert total.dtype == np.float32
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-6)
    _assert_grads_equal(ours, theirs, rtol=1e-6)


def test_a_single_tensor_and_no_gradients():
    w = mg.tensor([3.0, 4.0], requires_grad=True)
    w.grad = mg.tensor([3.0, 4.0])
    assert clip_grad_norm_(w, 1.0).item() == pytest.approx(5.0)
    np.testing.assert_allclose(w.grad.numpy(), np.array([3.0, 4.0]) / (5.0 + 1e-6))
    nothing = clip_grad_norm_([mg.zeros(2, requires_grad=True)], 1.0)
    assert nothing.item() == torch.nn.utils.clip_grad_norm_(
        [torch.zeros(2, requires_grad=True)], 1.0).item() == 0.0


def test_a_non_finite_norm_is_an_error_only_when_asked():
    for value in (float("nan"), float("inf")):
        ours, theirs = _pair()
        ours[0].grad.data[0, 0] = theirs[0].grad[0, 0] = value
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped") as e:
            clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
        with pytest.raises(RuntimeError) as t:
            torch.nn.utils.clip_grad_norm_(theirs, 1.0, error_if_nonfinite=True)
        assert str(e.value) == str(t.value)
        total = clip_grad_norm_(ours, 1.0)
        assert not np.isfinite(total.item())


def test_the_two_halves_compose_to_clip_grad_norm():
    ours, theirs = _pair(scale=3.0)
    total = get_total_norm([p.grad for p in ours if p.grad is not None], 2.0)
    clip_grads_with_norm_(ours, 0.7, total)
    expected = torch.nn.utils.get_total_norm([p.grad for p in theirs if p.grad is not None])
    torch.nn.utils.clip_grads_with_norm_(theirs, 0.7, expected)
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-12)
    _assert_grads_equal(ours, theirs, rtol=1e-12)


def test_clipping_writes_in_place_and_bumps_versions():
    ours, _ = _pair(scale=5.0)
    arrays = [p.grad._array for p in ours[:-1]]
    versions = [p.grad._version for p in ours[:-1]]
    clip_grad_norm_(ours, 0.1)
    assert all(p.grad._array is a for p, a in zip(ours, arrays))
    assert all(p.grad._version > v for p, v in zip(ours, versions))


@pytest.mark.parametrize("clip_value", [0.3, 2])
def test_clip_grad_value_matches_torch(clip_value):
    ours, theirs = _pair(scale=2.0)
    clip_grad_value_(ours, clip_value)
    torch.nn.utils.clip_grad_value_(theirs, clip_value)
    _assert_grads_equal(ours, theirs, rtol=0)


def test_parameters_to_vector_and_back():
    ours, theirs = _pair()
    vector = parameters_to_vector(ours)
    np.testing.assert_array_equal(vector.detach().numpy(),
                                  torch.nn.utils.parameters_to_vector(theirs).detach().numpy())
    (vector * mg.arange(vector.shape[0], dtype=mg.float64)).sum().backward()
    assert ours[0].grad.shape == (3, 4)
    new = mg.arange(vector.shape[0], dtype=mg.float64)
    storage = ours[1]._array
    vector_to_parameters(new, ours)
    torch.nn.utils.vector_to_parameters(torch.arange(vector.shape[0], dtype=torch.float64),
                                        theirs)
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o.detach().numpy(), t.detach().numpy())
    assert ours[1]._array is storage
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: ndarray"):
        vector_to_parameters(np.zeros(3), ours)


def test_torchs_attribute_paths_resolve_after_a_bare_import_without_starting_mpi():
    script = (
        "import sys, mpigrad\n"
        "assert mpigrad.nn.utils.clip_grad_norm_ and mpigrad.utils.data.DataLoader\n"
        "assert mpigrad.nn.utils.parameters_to_vector\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'MPI started at import'\n"
        "ddp = mpigrad.nn.parallel.DistributedDataParallel\n"
        "assert ddp.__name__ == 'DistributedDataParallel'\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
