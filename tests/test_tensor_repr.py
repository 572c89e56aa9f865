"""A tensor prints as torch prints it: number formats, alignment, summarisation, line
wrapping and suffixes, and torch.set_printoptions. Found by tests/programs/time_sequence.py,
which prints its predictions: numpy's layout (`tensor([0.  , -inf])`, `tensor(4.5)`) was not
torch's (`tensor([0.0000,   -inf])`, `tensor(4.5000)`)."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")

INF, NAN = float("inf"), float("nan")
CASES = [
    ([[0.0, -INF], [1.5, 2.25]], "float32"),
    (4.5, "float32"), (3.0, "float64"), (5, "int64"), (True, "bool"),
    ([1.0, 2.0, 3.0], "float32"), ([1, -2, 30], "int64"), ([1, 2], "int32"),
    ([0.1, 123.456, 1e-3], "float32"), ([1e-8, 1.0], "float64"), ([1e10, 1.0], "float32"),
    ([1e9, 2e9], "float32"), ([1.0, 2000.0], "float64"), ([NAN, 1.0], "float32"),
    ([NAN, INF, -INF], "float32"), ([0.0, 0.0], "float64"), ([-0.5, 0.25], "float16"),
    ([1.5, -3.0], "bfloat16"), ([True, False], "bool"), ([1, 200], "uint8"),
    ([1 + 2j, -0.5j], "complex64"), ([3.25 - 1j], "complex128"),
    (np.linspace(0, 1, 7), "float32"), (np.arange(2000.0), "float32"),
    (np.arange(1500).reshape(30, 50), "int64"), (np.arange(24.0).reshape(2, 3, 4), "float64"),
    (np.linspace(-1, 1, 40) ** 3, "float64"), (np.zeros((0,)), "float32"),
    (np.zeros((0, 3)), "int64"), (np.zeros((2, 0)), "float64"),
    (np.random.default_rng(0).standard_normal((4, 1100)), "float32"),
]


def _pair(values, dtype):
    array = np.asarray(values)
    theirs = torch.tensor(array).to(getattr(torch, dtype))
    ours = mg.tensor(array).to(getattr(mg, dtype))
    return ours, theirs


@pytest.mark.parametrize("values, dtype", CASES)
def test_a_tensor_prints_as_torchs(values, dtype):
    ours, theirs = _pair(values, dtype)
    assert repr(ours) == repr(theirs)
    assert str(ours) == str(theirs)


@pytest.mark.parametrize("default", ["float32", "float64"])
def test_the_dtype_suffix_follows_the_default_dtype(default):
    previous = mg.get_default_dtype()
    mg.set_default_dtype(getattr(mg, default))
    torch.set_default_dtype(getattr(torch, default))
    try:
        for dtype in ("float32", "float64", "complex64", "complex128", "int32"):
            ours, theirs = _pair([1.5, 2.0] if "int" not in dtype else [1, 2], dtype)
            assert repr(ours) == repr(theirs)
    finally:
        mg.set_default_dtype(previous)
        torch.set_default_dtype(torch.float32)


def test_gradient_suffixes_and_wrapping_past_the_line_width():
    values = np.random.default_rng(1).standard_normal(12)
    ours = mg.tensor(values, requires_grad=True)
    theirs = torch.tensor(values, requires_grad=True)
    assert repr(ours) == repr(theirs)
    assert repr(ours * 2) == repr(theirs * 2)  # grad_fn=<MulBackward0> on a line of its own


@pytest.mark.parametrize("options", [
    dict(precision=2), dict(sci_mode=True), dict(sci_mode=False), dict(threshold=5),
    dict(edgeitems=1, threshold=5), dict(linewidth=30), dict(profile="short"),
    dict(profile="full"), dict(precision=6, profile="short"),
])
def test_set_printoptions_as_torchs(options):
    values = [[1.123456, 22.5, -3e-3, 4.0, 5.5, 6.25, 7.0], [8.0, 9.0, 10.0, 11.0, 12.0, 13.0,
                                                            14.0]]
    try:
        mg.set_printoptions(**options)
        torch.set_printoptions(**options)
        for array in (np.array(values), np.arange(12), np.arange(1200.0)):
            assert repr(mg.tensor(array)) == repr(torch.tensor(array))
    finally:
        mg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_an_unknown_profile_is_a_value_error():
    with pytest.raises(ValueError, match="Invalid profile"):
        mg.set_printoptions(profile="long")
