"""A Tensor meets other libraries' objects as torch's does: comparisons with what they do not
take return NotImplemented (so `t == pytest.approx(...)` works and `t == None` is False), and
torch.tensor / np.from_dlpack read an mpigrad tensor through DLPack, 0-d ones included."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("lib", [mg, torch], ids=["mpigrad", "torch"])
def test_pytest_approx_compares_tensors_as_with_torch(lib):
    t = lib.tensor([1.0, 2.0])
    assert t == pytest.approx([1.0, 2.0])
    assert pytest.approx([1.0, 2.0 + 1e-9]) == t
    assert t == pytest.approx(lib.tensor([1.0, 2.0 + 1e-9]))
    assert lib.tensor(0.1 + 0.2) == pytest.approx(0.3)
    assert not t == pytest.approx([1.0, 2.1])
    assert t != pytest.approx([1.0, 2.1])


def test_comparisons_with_unknown_operands_are_torchs():
    for lib in (mg, torch):
        t = lib.tensor([1.0, 2.0])
        thing = object()
        assert t.__eq__(thing) is NotImplemented and t.__ne__(None) is NotImplemented
        assert (t == thing) is False and (t == None) is False  # noqa: E711 (the point)
        assert (t != thing) is True and (t == [1.0, 2.0]) is False
        with pytest.raises(TypeError, match="not supported between instances of 'Tensor'"):
            t < thing
    # Numbers, arrays and tensors still compare elementwise, as in torch.
    t = mg.tensor([1.0, 2.0])
    for other in (1.0, 2, np.float32(1.0), np.array([1.0, 3.0]), mg.tensor([1.0, 3.0])):
        expected = torch.tensor([1.0, 2.0]) == (torch.tensor(np.asarray(other, np.float32))
                                                if not isinstance(other, (int, float)) else other)
        np.testing.assert_array_equal((t == other).numpy(), expected.numpy())
        np.testing.assert_array_equal((t >= other).numpy(), (~(t < other)).numpy())


@pytest.mark.parametrize("value", [1.5, [1.0, 2.0], [[1, 2], [3, 4]], [True, False]])
def test_torch_reads_an_mpigrad_tensor_of_any_rank(value):
    ours = mg.tensor(value)
    for convert in (torch.tensor, torch.as_tensor):
        theirs = convert(ours)
        assert str(theirs.dtype) == f"torch.{ours.dtype.name}" and theirs.shape == ours.shape
        np.testing.assert_array_equal(theirs.numpy(), ours.numpy())
    np.testing.assert_array_equal(np.from_dlpack(ours), ours.numpy())
    # A list of 0-d tensors is numbers, in mpigrad as in torch.
    items = [mg.tensor(v) for v in np.ravel(value)]
    np.testing.assert_array_equal(mg.tensor(items).numpy(),
                                  torch.tensor([torch.tensor(v) for v in np.ravel(value)]).numpy())


def test_exporting_what_dlpack_cannot_carry_is_a_clear_error():
    for lib in (mg, torch):  # torch's own error, type and words
        with pytest.raises(BufferError, match="Can't export tensors that require gradient"):
            lib.ones(2, requires_grad=True).__dlpack__()
    with pytest.raises(BufferError, match="Can't export tensors that require gradient"):
        torch.tensor(mg.ones(2, requires_grad=True))
    with pytest.raises(BufferError, match="no bfloat16"):
        torch.tensor(mg.ones(2, dtype=mg.bfloat16))
