"""Arithmetic, matrix products, casts and comparisons."""
import numpy as np

from ..autograd import grad_mode
from .. import dtypes
from ..dtypes import check_same_dtype
from ..kernels import threads
from ..kernels.numpy.linalg import addmm, as_matrix, linear_on_onednn
from ..tensor import Tensor
from .core import Op, named
from .elementwise import log, torch_promoted, where
from .reduction import sum


def _inplace_ufunc(ufunc):
    def run(target, other):
        ufunc(target, other, out=target, casting="same_kind")
    return run


add = Op("add", torch_promoted(np.add),
         (lambda g, ans, a, b: g,
          lambda g, ans, a, b: g),
         elementwise=True, inplace_fast=_inplace_ufunc(np.add))


def _is_bool(x):
    return isinstance(x, (bool, np.bool_)) or getattr(x, "dtype", None) == np.bool_


_subtract = torch_promoted(np.subtract)


def _bool_free_subtract(a, b):
    """torch refuses a bool operand in a subtraction, as numpy refuses two."""
    if (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype
            and a.dtype != np.bool_):
        return _subtract(a, b)
    if _is_bool(a) and _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(a) or _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")
    return _subtract(a, b)


sub = Op("sub", _bool_free_subtract,
         (lambda g, ans, a, b: g,
          lambda g, ans, a, b: -g),
         elementwise=True, inplace_fast=_inplace_ufunc(np.subtract))

# mul's and div's fused backwards are the rules on arrays: one numpy call per gradient, where
# a rule's Tensor op costs a dispatch and a tensor besides (most of a small op's backward).
def _mul_backward(needs, g, ans, a, b):
    return (np.multiply(g, b) if needs[0] else None,
            np.multiply(g, a) if needs[1] else None)


def _div_backward(needs, g, ans, a, b):
    return (np.true_divide(g, b) if needs[0] else None,
            np.true_divide(-g * a, b * b) if needs[1] else None)


mul = Op("mul", torch_promoted(np.multiply),
         (lambda g, ans, a, b: g * b,
          lambda g, ans, a, b: g * a),
         saves="a b", elementwise=True, inplace_fast=_inplace_ufunc(np.multiply),
         backward=_mul_backward)

div = Op("div", torch_promoted(np.true_divide, to_float=True),
         (lambda g, ans, a, b: g / b,
          lambda g, ans, a, b: -g * a / (b * b)),
         saves="a b", elementwise=True, inplace_fast=_inplace_ufunc(np.true_divide),
         backward=_div_backward)

neg = Op("neg", np.negative,
         (lambda g, ans, x: -g,), elementwise=True)


def _integer_division_checked(ufunc):
    """torch refuses an integer modulo by zero (numpy would answer 0 with a warning)."""
    promoted = torch_promoted(ufunc)

    def forward(a, b):
        if (np.result_type(a, b).kind in "iub" and not np.all(b)):
            raise RuntimeError("ZeroDivisionError")
        return promoted(a, b)
    return forward


# remainder takes the divisor's sign (Python's %), fmod the dividend's (C's); both
# a - q * b with q the quotient floored or truncated, so d/db = -q.
remainder = Op("remainder", _integer_division_checked(np.remainder),
               (lambda g, ans, a, b: g,
                lambda g, ans, a, b: -g * (a / b).floor()),
               saves="a b", elementwise=True)

fmod = Op("fmod", _integer_division_checked(np.fmod),
          (lambda g, ans, a, b: g,
           lambda g, ans, a, b: -g * (a / b).div(1, rounding_mode="trunc")),
          saves="a b", elementwise=True)


def _pow_exponent_grad(g, ans, a, b):
    # d(a^b)/db = a^b log a, defined only for a > 0; torch uses 0 elsewhere.
    positive = a > 0
    return where(positive, g * ans * log(where(positive, a, 1.0)), 0.0)


pow = Op("pow", torch_promoted(np.power),
         (lambda g, ans, a, b: g * b * a ** (b - 1),
          _pow_exponent_grad),
         saves="a b ans", elementwise=True)

_matmul = Op("matmul", None,
             (lambda g, ans, a, b: g @ b.mT,
              lambda g, ans, a, b: a.mT @ g),
             (lambda t, ans, a, b: t @ b,
              lambda t, ans, a, b: a @ t),
             saves="a b", grad_fn_name="MmBackward0")


def matmul(a, b):
    """torch.matmul: 1-D operands are promoted to matrices and the added dimension removed.
    Operands of different dtypes are an error, not promoted."""
    a = a if isinstance(a, Tensor) else Tensor(a)
    b = b if isinstance(b, Tensor) else Tensor(b)
    check_same_dtype("mat1 and mat2 must have the same dtype, but got {} and {}", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1-D, got "
                           f"{a.ndim}-D and {b.ndim}-D")
    if a.ndim == 1 and b.ndim == 1:
        if a.shape != b.shape:
            raise RuntimeError(f"inconsistent tensor size: {a.shape} @ {b.shape}")
        return named(sum((a * b), None, False, None), "DotBackward0", a, b)
    if a.ndim == 1:
        return _matmul(a.unsqueeze(0), b).squeeze(-2)
    if b.ndim == 1:
        out = _matmul(a, b.unsqueeze(-1)).squeeze(-1)
        return named(out, "MvBackward0", a, b) if a.ndim == 2 else out
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape} and {b.shape})")
    # torch multiplies a stack of matrices as one matrix product (or bmm) viewed back.
    out = _matmul(a, b)
    return named(out, "UnsafeViewBackward0", a, b) if a.ndim > 2 else out


def _transposed_gemm_pays(rows, out_features):
    """Whether linear's forward should multiply W @ x^T and copy the result back to row-major.
    OpenBLAS (one thread) runs that 10-45% faster than x @ W^T for 8 to 64 rows and outputs of
    128 or more (the MLP's (64, 1024) x (1024, 1024): 0.77x); from 128 rows on it is slower
    (GPT-2's (1024, 768) x (768, 3072): 1.43x, a word LM's 700-row decoder: 1.2-1.9x), and
    below 8 rows or 128 outputs the copy costs more than the kernel saves."""
    return 8 <= rows <= 64 and out_features >= 128


def _linear_forward(x, weight, bias):
    if x.dtype != weight.dtype or (bias is not None and bias.dtype != weight.dtype):
        check_same_dtype("mat1 and mat2 must have the same dtype, but got {} and {}", x, weight)
        check_same_dtype("self and mat2 must have the same dtype, but got {} and {}", bias,
                         weight)
    if x.ndim > 2:
        # numpy multiplies a stack of matrices one matrix at a time: (35, 20, 200) by
        # (200, 1000) took 6.5 ms against 3.1 ms as one (700, 200) product
        return _linear_of_matrix(as_matrix(x), weight, bias).reshape(*x.shape[:-1],
                                                                     weight.shape[0])
    return _linear_of_matrix(x, weight, bias)


def _linear_of_matrix(x, weight, bias):
    out = linear_on_onednn(x, weight, bias)
    if out is not None:
        return out
    if x.ndim == 2 and _transposed_gemm_pays(x.shape[0], weight.shape[0]):
        out = np.empty((x.shape[0], weight.shape[0]), dtype=np.result_type(x, weight))
        transposed = threads.matmul(weight, x.T).T
        if bias is None:
            np.copyto(out, transposed)
        else:
            np.add(transposed, bias, out=out)
        return out
    if bias is None:
        return threads.matmul(x, weight.T)  # small products on one BLAS thread (see there)
    return addmm(x, weight, bias)


def _linear_input_grad(g, ans, x, weight, bias):
    return g @ weight if g.ndim <= 2 else (as_matrix(g) @ weight).reshape(*g.shape[:-1],
                                                                          weight.shape[1])


def _linear_weight_grad(g, ans, x, weight, bias):
    return as_matrix(g).mT @ as_matrix(x)  # the weight sees every row alike


# y = x W^T + b as one node: its weight gradient comes out C-contiguous in W's layout, which a
# transpose-then-matmul composition would not give.
linear = Op("linear", _linear_forward,
            (_linear_input_grad,
             _linear_weight_grad,
             lambda g, ans, x, weight, bias: g),
            (lambda t, ans, x, weight, bias: linear(t, weight, None),
             lambda t, ans, x, weight, bias: linear(x, t, None),
             lambda t, ans, x, weight, bias: t),
            saves="x weight",
            grad_fn_name=lambda params, args: "MmBackward0" if args[2] is None
            else "AddmmBackward0")


_cast = Op("cast", lambda x, dtype: x.astype(dtype),
           (lambda g, ans, x, dtype: g,), elementwise=True,
           grad_fn_name="ToCopyBackward0")


def cast(x, dtype):
    if not dtypes.is_differentiable(dtype):
        # Integer and bool results carry no gradient, as in torch.
        with grad_mode.no_grad():
            return _cast(x, dtype=dtype)
    return _cast(x, dtype=dtype)


# order "K" keeps the layout, as torch's clone does; "C" is what contiguous() asks for.
clone = Op("clone", lambda x, order="K": np.copy(x, order=order),
           (lambda g, ans, x, order="K": g,), elementwise=True)


def _constant(forward):
    """A function whose result never requires grad (comparisons, logic)."""
    def run(*args):
        return Tensor.wrap(np.asarray(forward(*[a._array if isinstance(a, Tensor) else a
                                                  for a in args])))
    run.__name__ = forward.__name__
    return run


eq = _constant(np.equal)
ne = _constant(np.not_equal)
lt = _constant(np.less)
le = _constant(np.less_equal)
gt = _constant(np.greater)
ge = _constant(np.greater_equal)
logical_and = _constant(np.logical_and)
logical_or = _constant(np.logical_or)
logical_not = _constant(np.logical_not)
isnan = _constant(np.isnan)
isfinite = _constant(np.isfinite)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Where |input - other| <= atol + rtol * |other| (equal infinities are close), as a bool
    tensor; torch takes two tensors of one dtype."""
    if isinstance(other, Tensor) and other.dtype != input.dtype:
        raise RuntimeError(f"{dtypes.torch_name(input.dtype)} did not match "
                           f"{dtypes.torch_name(other.dtype)}")
    other = other._array if isinstance(other, Tensor) else other
    return Tensor.wrap(np.isclose(input._array, other, rtol=rtol, atol=atol,
                                  equal_nan=equal_nan))


def equal(input, other):
    """Whether the two tensors have one shape and equal elements (dtypes promoted)."""
    return input.shape == other.shape and bool(np.array_equal(input._array, other._array))


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether |input - other| <= atol + rtol * |other| everywhere (broadcasting), a bool."""
    return bool(np.allclose(input._array, other._array if isinstance(other, Tensor) else other,
                            rtol=rtol, atol=atol, equal_nan=equal_nan))


def lerp(input, end, weight):
    """input + weight * (end - input), differentiable in all three."""
    return input + weight * (end - input)
