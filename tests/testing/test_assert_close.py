"""mpigrad.testing.assert_close against torch.testing.assert_close: the same verdict, the
same exception type and the same message for the same inputs."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad.testing import assert_close

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
# (actual, expected, keyword arguments), as nested lists with a dtype name, or Python numbers.
CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "float32", {}),
    ([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], "float32", {}),
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.00001], "float32", {}),  # within float32's atol
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0000001], "float64", {}),
    ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 5.0]], "float64", {}),
    ([1.0, 2.0], [1.0, 2.1], "float16", {}),
    ([1, 2, 3], [1, 2, 4], "int64", {}),
    ([True, False], [True, True], "bool", {}),
    ([0.0, 1.0], [0.0, 0.0], "float32", {}),
    ([1.0, NAN], [1.0, NAN], "float64", {}),
    ([1.0, NAN], [1.0, NAN], "float64", {"equal_nan": True}),
    ([1.0, INF], [1.0, INF], "float32", {}),
    ([1.0, 2.0], [1.1, 2.0], "float32", {"rtol": 0.2, "atol": 0.0}),
    ([1.0, 2.0], [1.1, 2.0], "float32", {"rtol": 0.0, "atol": 0.0}),
    (2.5, 2.5, "float32", {}),
    (2.5, 3.5, "float64", {}),
    ([1.0, 2.0], [1.0, 2.5], "float32", {"msg": "custom"}),
    ([1.0, 2.0], [1.0, 2.5], "float32", {"msg": lambda text: text.upper()}),
]


def _pair(values, dtype, library):
    if library is torch:
        return torch.tensor(values, dtype=getattr(torch, dtype))
    return mg.tensor(values, dtype=getattr(mg, dtype))


def _outcome(call):
    try:
        call()
    except Exception as error:  # the type and the words are what is compared
        return type(error).__name__, str(error)
    return None


@pytest.mark.parametrize("actual, expected, dtype, options", CASES)
def test_tensors_like_torch(actual, expected, dtype, options):
    want = _outcome(lambda: torch.testing.assert_close(
        _pair(actual, dtype, torch), _pair(expected, dtype, torch), **options))
    got = _outcome(lambda: assert_close(_pair(actual, dtype, mg), _pair(expected, dtype, mg),
                                        **options))
    assert got == want


def test_dtype_shape_and_tolerance_arguments_like_torch():
    pairs = [
        ((torch.ones(2), torch.ones(2, dtype=torch.float64)),
         (mg.ones(2), mg.ones(2, dtype=mg.float64)), {}),
        ((torch.ones(2), torch.ones(3)), (mg.ones(2), mg.ones(3)), {}),
        ((torch.ones(2), torch.ones(2)), (mg.ones(2), mg.ones(2)), {"rtol": 1e-3}),
        ((torch.ones(2), torch.ones(2)), (mg.ones(2), mg.ones(2)), {"atol": 1e-3}),
    ]
    for (ta, te), (ma, me), options in pairs:
        want = _outcome(lambda: torch.testing.assert_close(ta, te, **options))
        got = _outcome(lambda: assert_close(ma, me, **options))
        assert got[0] == want[0]
        # torch spells its dtypes and sizes its own way: compare past the attribute's name.
        assert got[1].split(":")[0] == want[1].split(":")[0]
    # check_dtype=False promotes, with the looser dtype's tolerances, as torch.
    want = _outcome(lambda: torch.testing.assert_close(
        torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1], dtype=torch.float64),
        check_dtype=False))
    got = _outcome(lambda: assert_close(mg.tensor([1.0, 2.0]),
                                        mg.tensor([1.0, 2.1], dtype=mg.float64),
                                        check_dtype=False))
    assert got == want


def test_containers_and_scalars_like_torch():
    cases = [
        (lambda T: [T([1.0]), T([1.0, 3.0])], lambda T: [T([1.0]), T([1.0, 2.0])]),
        (lambda T: [T([1.0])], lambda T: [T([1.0]), T([2.0])]),
        (lambda T: {"a": T([1.0, NAN])}, lambda T: {"a": T([1.0, NAN])}),
        (lambda T: {"a": T([1.0])}, lambda T: {"b": T([1.0])}),
        (lambda T: 1, lambda T: 1.0),
        (lambda T: 1.0, lambda T: 1.5),
        (lambda T: (1, 2), lambda T: (1, 2)),
    ]
    for actual, expected in cases:
        want = _outcome(lambda: torch.testing.assert_close(actual(torch.tensor),
                                                           expected(torch.tensor)))
        got = _outcome(lambda: assert_close(actual(mg.tensor), expected(mg.tensor)))
        assert got == want


def test_numpy_arrays_and_mixed_types():
    assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]))
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2"):
        assert_close(np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    with pytest.raises(TypeError, match="No comparison pair"):  # as torch, tensor vs ndarray
        assert_close(mg.ones(2), np.ones(2, np.float32))
