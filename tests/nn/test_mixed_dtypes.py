"""Mixed dtypes follow torch: matrix products, convolutions and normalisations refuse operands
of different dtypes (a float64 batch into a float32 model is an error, not a silent float64
computation); elementwise ops and losses promote."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad import nn

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _both(shape, dtype):
    array = np.arange(np.prod(shape), dtype=dtype).reshape(shape) / 7
    return mg.tensor(array.astype(dtype)), torch.tensor(array.astype(dtype))


D, FL = np.float64, np.float32

REFUSED = {
    "linear": (lambda lib, f, a, b: f.linear(a, b), ((2, 3), D), ((4, 3), FL),
               "mat1 and mat2 must have the same dtype, but got Double and Float"),
    "linear 3-D": (lambda lib, f, a, b: f.linear(a, b), ((2, 2, 3), D), ((4, 3), FL),
                   "mat1 and mat2 must have the same dtype, but got Double and Float"),
    "linear bias": (lambda lib, f, a, b: f.linear(a, b, b[:, 0].double()), ((2, 3), FL),
                    ((4, 3), FL),
                    "self and mat2 must have the same dtype, but got Double and Float"),
    "matmul": (lambda lib, f, a, b: a @ b, ((2, 3), D), ((3, 2), FL),
               "mat1 and mat2 must have the same dtype, but got Double and Float"),
    "dot": (lambda lib, f, a, b: a @ b, ((3,), D), ((3,), FL),
            "mat1 and mat2 must have the same dtype, but got Double and Float"),
    "batched matmul": (lambda lib, f, a, b: a @ b, ((2, 2, 3), FL), ((2, 3, 2), D),
                       "mat1 and mat2 must have the same dtype, but got Float and Double"),
    "int @ float": (lambda lib, f, a, b: a @ b, ((2, 3), np.int64), ((3, 2), FL),
                    "mat1 and mat2 must have the same dtype, but got Long and Float"),
    "conv2d": (lambda lib, f, a, b: f.conv2d(a, b), ((1, 1, 4, 4), D), ((1, 1, 3, 3), FL),
               "expected scalar type Double but found Float"),
    "layer_norm": (lambda lib, f, a, b: f.layer_norm(a, (3,), b[0], b[1]), ((2, 3), D),
                   ((2, 3), FL), "mixed dtype"),
    "batch_norm": (lambda lib, f, a, b: f.batch_norm(a, b[0], b[1], b[0], b[1], True),
                   ((2, 3), D), ((2, 3), FL), "mixed dtype"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_matrix_products_convolutions_and_norms_refuse_mixed_dtypes_as_torch(case):
    run, (shape_a, dtype_a), (shape_b, dtype_b), message = REFUSED[case]
    (a, ta), (b, tb) = _both(shape_a, dtype_a), _both(shape_b, dtype_b)
    with pytest.raises(RuntimeError):
        run(torch, TF, ta, tb)
    with pytest.raises(RuntimeError, match=message):
        run(mg, F, a, b)


PROMOTED = {
    "add": lambda lib, f, a, b: a + b,
    "mul": lambda lib, f, a, b: a * b,
    "mse_loss": lambda lib, f, a, b: f.mse_loss(a, b),
    "maximum": lambda lib, f, a, b: lib.maximum(a, b),
}


@pytest.mark.parametrize("case", PROMOTED)
def test_elementwise_ops_and_losses_promote_as_torch(case):
    (a, ta), (b, tb) = _both((2, 3), D), _both((2, 3), FL)
    expected = PROMOTED[case](torch, TF, ta, tb)
    got = PROMOTED[case](mg, F, a, b)
    assert expected.dtype == torch.float64 and got.dtype == np.float64
    np.testing.assert_allclose(got.data, expected.numpy())


def test_a_float64_batch_into_a_float32_model_is_an_error():
    mg.set_default_dtype(np.float32)  # conftest's float64 is restored afterwards
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3))
    batch = np.ones((5, 1, 4, 4))  # numpy's default: float64
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        model(mg.tensor(batch))
    assert model(mg.tensor(batch.astype(np.float32))).dtype == np.float32
    assert model.double()(mg.tensor(batch)).dtype == np.float64


# torch's promotion, where numpy's differs: an integer with a float is that float, tensors
# with dimensions decide before 0-d ones and those before Python numbers, and true division
# of integers gives the default float dtype.
CATEGORIES = [
    ("float32 tensor, int64 tensor", lambda L: L.tensor([1.5, 2.0]), lambda L: L.tensor([2, 3])),
    ("float32 tensor, float64 0-d", lambda L: L.tensor([1.5, 2.0]),
     lambda L: L.tensor(2.5, dtype=L.float64)),
    ("float32 tensor, int64 0-d", lambda L: L.tensor([1.5, 2.0]), lambda L: L.tensor(3)),
    ("int64 tensor, Python float", lambda L: L.tensor([1, 2]), lambda L: 2.5),
    ("bool tensor, Python float", lambda L: L.tensor([True, False]), lambda L: 2.5),
    ("int32 tensor, int64 0-d", lambda L: L.tensor([1, 2], dtype=L.int32), lambda L: L.tensor(3)),
    ("int32 tensor, float64 0-d", lambda L: L.tensor([1, 2], dtype=L.int32),
     lambda L: L.tensor(0.5, dtype=L.float64)),
    ("uint8 tensor, int8 tensor", lambda L: L.tensor([1, 2], dtype=L.uint8),
     lambda L: L.tensor([3, 4], dtype=L.int8)),
    ("int64 tensors", lambda L: L.tensor([4, 9]), lambda L: L.tensor([2, 3])),
]
BINARY = {"add": lambda L, a, b: a + b, "sub": lambda L, a, b: a - b,
          "mul": lambda L, a, b: a * b, "div": lambda L, a, b: a / b,
          "pow": lambda L, a, b: a ** b, "remainder": lambda L, a, b: a % b,
          "maximum": lambda L, a, b: L.maximum(a, b) if isinstance(b, L.Tensor) else None,
          "reversed add": lambda L, a, b: b + a}


@pytest.mark.parametrize("operands", CATEGORIES, ids=[c[0] for c in CATEGORIES])
@pytest.mark.parametrize("op", BINARY)
def test_binary_ops_promote_by_torch_s_rules(op, operands, monkeypatch):
    monkeypatch.setattr(mg.dtypes, "_default", [np.dtype(np.float32)])  # torch's default
    _, first, second = operands
    try:
        expected = BINARY[op](torch, first(torch), second(torch))
    except RuntimeError as refusal:  # a bool in a subtraction
        with pytest.raises(RuntimeError, match=str(refusal).split(".")[0]):
            BINARY[op](mg, first(mg), second(mg))
        return
    got = BINARY[op](mg, first(mg), second(mg))
    if expected is None:
        return
    assert str(got.dtype) == str(expected.dtype).replace("torch.", "")
    np.testing.assert_allclose(got.numpy().astype(np.float64),
                               expected.numpy().astype(np.float64), rtol=1e-6)


def test_a_promoted_product_s_gradient_keeps_the_input_s_dtype():
    weight = mg.tensor(np.array([1.5, -2.0], np.float32), requires_grad=True)
    (weight * mg.tensor([2, 3])).sum().backward()
    assert weight.grad.dtype == np.float32
    np.testing.assert_array_equal(weight.grad.numpy(), [2.0, 3.0])


def test_promote_types_and_result_type_are_torch_s():
    names = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32",
             "float64"]
    for first in names:
        for second in names:
            expected = torch.promote_types(getattr(torch, first), getattr(torch, second))
            got = mg.promote_types(getattr(mg, first), getattr(mg, second))
            assert str(got) == str(expected).replace("torch.", ""), (first, second)
    cases = [(lambda L: L.tensor([1, 2]), lambda L: 2.5),
             (lambda L: L.tensor([1.0], dtype=L.float16),
              lambda L: L.tensor(2.0, dtype=L.float64)),
             (lambda L: L.tensor(True), lambda L: L.tensor([3], dtype=L.int8)),
             (lambda L: 3, lambda L: L.tensor([True]))]
    before = mg.get_default_dtype()
    mg.set_default_dtype(np.float32)  # torch's, for the Python float
    try:
        for first, second in cases:
            expected = str(torch.result_type(first(torch), second(torch)))
            assert str(mg.result_type(first(mg), second(mg))) == expected.replace("torch.", "")
    finally:
        mg.set_default_dtype(before)
