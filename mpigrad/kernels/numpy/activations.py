"""GELU, SiLU, the sigmoid, ELU and softplus: the numpy backend's kernels over the compiled
loops (one pass each way)."""
import numpy as np

from ._compiled import compute_dtype, flat, fresh, loops, result


def _pointwise(loop, x, *parameters):
    out = fresh(x.shape, x.dtype)
    loop(flat(x), *parameters, out.reshape(-1))
    return result(out, x.dtype)


def _pointwise_backward(loop, needs, g, x, *parameters):
    out = fresh(x.shape, x.dtype)
    loop(flat(g, out.dtype), flat(x), *parameters, out.reshape(-1))
    return (result(out, x.dtype),)


def _in_compute_dtype(dtype, *values):
    """The loop's scalar parameters in the dtype it computes in, so a float32 loop stays in
    float32 arithmetic."""
    work = compute_dtype(dtype)
    return [work(value) for value in values]


def _by_dtype(name, dtype):
    """The loop `name` for this dtype's compute dtype: name_f64 or name_f32."""
    return getattr(loops("activations"),
                   name + ("_f64" if compute_dtype(dtype) is np.float64 else "_f32"))


def _gelu_loops(dtype, approximate, backward):
    name = "gelu_backward" if backward else "gelu"
    if approximate == "tanh":  # one loop, float64 arithmetic, for every dtype
        return getattr(loops("activations"), name.replace("gelu", "gelu_tanh"))
    return _by_dtype(name, dtype)


def gelu(x, approximate):
    return _pointwise(_gelu_loops(x.dtype, approximate, False), x)


def gelu_backward(needs, g, ans, x, approximate):
    return _pointwise_backward(_gelu_loops(x.dtype, approximate, True), needs, g, x)


def silu(x):
    return _pointwise(_by_dtype("silu", x.dtype), x)


def silu_backward(needs, g, ans, x):
    return _pointwise_backward(_by_dtype("silu_backward", x.dtype), needs, g, x)


def sigmoid(x):
    """Any dtype (an integer's result is floating, as torch's): one compiled pass."""
    return _pointwise(_by_dtype("sigmoid", x.dtype), x)


def sigmoid_backward(needs, g, ans, x):
    """g ans (1 - ans) in one pass, from the output."""
    y = flat(ans)
    out = np.empty(y.size, y.dtype)
    loops("activations").sigmoid_backward(flat(g, y.dtype), y, out)
    return (result(out.reshape(ans.shape), ans.dtype),)


def _elu_parameters(dtype, alpha, scale, input_scale):
    return _in_compute_dtype(dtype, alpha * scale, scale, input_scale)


def elu(x, alpha, scale, input_scale):
    """ELU, SELU and CELU: one compiled pass each way, float32 in float32 arithmetic."""
    return _pointwise(loops("activations").elu, x,
                      *_elu_parameters(x.dtype, alpha, scale, input_scale))


def elu_backward(needs, g, ans, x, alpha, scale, input_scale):
    return _pointwise_backward(loops("activations").elu_backward, needs, g, x,
                               *_elu_parameters(x.dtype, alpha, scale, input_scale))


def softplus(x, beta, threshold):
    return _pointwise(loops("activations").softplus, x,
                      *_in_compute_dtype(x.dtype, beta, threshold))


def softplus_backward(needs, g, ans, x, beta, threshold):
    return _pointwise_backward(loops("activations").softplus_backward, needs, g, x,
                               *_in_compute_dtype(x.dtype, beta, threshold))
