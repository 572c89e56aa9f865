"""The three convolution kernels (conv2d, conv_transpose2d as its input's gradient,
conv2d_weight) on oneDNN's direct convolutions, for the calls where they are faster than the
numpy kernels (`takes`). Each returns None where oneDNN does not take the call; the numpy
kernel then computes it.

oneDNN picks its own (blocked) layouts for the images, kernels and results; every call
reorders mpigrad's NCHW / OIHW arrays into them and the result back, into work buffers of
the call's own. The primitives (and their reorders) are built once per geometry and thread
count, per thread (_primitive.py): building one takes milliseconds, running one on the
ResNet's layers a few.
"""
import ctypes

import numpy as np

from . import (ANY_LAYOUT, ARG_BIAS, ARG_DIFF_DST, ARG_DIFF_SRC, ARG_DIFF_WEIGHTS, ARG_DST,
               ARG_SRC, ARG_WEIGHTS, FORWARD_TRAINING, PLAIN_1D, PLAIN_4D, Dims, Pointer, library)
from ..threads import get_num_threads
from ._primitive import PlainCall, cached

CONVOLUTION_DIRECT = 1
_OUTPUT = {"forward": ARG_DST, "data": ARG_DIFF_SRC, "weights": ARG_DIFF_WEIGHTS}

# Where the numpy kernels stay faster (jobs/bench/bench_onednn.py, docs/benchmarks.md): a 1x1
# kernel, whose columns are a view of the image (oneDNN's reorders cost more than the GEMM),
# and the gradients for few input channels, by the fewest that oneDNN takes: the input's
# gradient of the ResNet's stem (3) and the CNN's first layer (1), the weight's of the
# CNN's layers (1 and 10 channels, 5x5), where the numpy kernels' direct loops win.
_MIN_CHANNELS = {"forward": 1, "data": 8, "weights": 16}
# Those were measured on one thread. On more, oneDNN's threads share out the small weight
# gradients that the numpy kernels' chunks hardly speed up: the CNN's step on 2 threads took
# 5.5 ms with oneDNN computing them against 6.5 ms, the ResNet's within noise of its 33 ms.
_MIN_CHANNELS_THREADED = dict(_MIN_CHANNELS, weights=1)


def takes(kind, arrays, weight_shape, groups):
    """Whether oneDNN computes this convolution (`kind` "forward", "data" for the input's
    gradient or "weights" for the weight's): float32 arrays, no groups, a kernel bigger than
    1x1, enough input channels, and oneDNN loaded."""
    return (groups == 1 and all(array.dtype == np.float32 for array in arrays)
            and tuple(weight_shape[2:]) != (1, 1)
            and weight_shape[1] >= (_MIN_CHANNELS if get_num_threads() == 1
                                    else _MIN_CHANNELS_THREADED)[kind]
            and library() is not None)


def _geometry(in_size, out_size, kernel_size, stride, padding, dilation):
    """strides, dilations, left and right paddings as oneDNN takes them: dilation counts the
    gaps, and the right padding is what makes out_size the output of in_size (torch rounds
    the output size down, and conv_transpose2d's input size may be larger than the forward
    of it covers)."""
    right = [(o - 1) * s + d * (k - 1) + 1 - i - p for i, o, k, s, p, d in
             zip(in_size, out_size, kernel_size, stride, padding, dilation)]
    return (Dims(*stride), Dims(*(d - 1 for d in dilation)), Dims(*padding), Dims(*right))


def _build(kind, dnnl, x_shape, w_shape, y_shape, has_bias, stride, padding, dilation):
    """The PlainCall of `kind` (forward, data or weights) for this geometry."""
    geometry = _geometry(x_shape[2:], y_shape[2:], w_shape[2:], stride, padding, dilation)
    shapes = {ARG_SRC: x_shape, ARG_WEIGHTS: w_shape, ARG_DST: y_shape}
    any_layout = {arg: dnnl.desc(shape, ANY_LAYOUT) for arg, shape in shapes.items()}
    plain = {arg: dnnl.desc(shape, PLAIN_4D) for arg, shape in shapes.items()}
    bias = dnnl.desc((w_shape[0],), PLAIN_1D) if has_bias else None
    descs = list(any_layout.values()) + list(plain.values()) + ([bias] if has_bias else [])
    made = []
    try:
        forward = Pointer()
        dnnl.call("dnnl_convolution_forward_primitive_desc_create", ctypes.byref(forward),
                  dnnl.engine, FORWARD_TRAINING, CONVOLUTION_DIRECT, any_layout[ARG_SRC],
                  any_layout[ARG_WEIGHTS], bias, any_layout[ARG_DST], *geometry, None)
        made.append(forward)
        if kind == "forward":
            plain_descs = {ARG_SRC: plain[ARG_SRC], ARG_WEIGHTS: plain[ARG_WEIGHTS],
                           ARG_DST: plain[ARG_DST]}
            if has_bias:
                plain_descs[ARG_BIAS] = bias
            return PlainCall(dnnl, forward, plain_descs, {ARG_DST})
        backward = Pointer()
        if kind == "data":
            dnnl.call("dnnl_convolution_backward_data_primitive_desc_create",
                      ctypes.byref(backward), dnnl.engine, CONVOLUTION_DIRECT,
                      any_layout[ARG_SRC], any_layout[ARG_WEIGHTS], any_layout[ARG_DST],
                      *geometry, forward, None)
            made.append(backward)
            return PlainCall(dnnl, backward, {ARG_DIFF_DST: plain[ARG_DST],
                                              ARG_WEIGHTS: plain[ARG_WEIGHTS],
                                              ARG_DIFF_SRC: plain[ARG_SRC]}, {ARG_DIFF_SRC})
        dnnl.call("dnnl_convolution_backward_weights_primitive_desc_create",
                  ctypes.byref(backward), dnnl.engine, CONVOLUTION_DIRECT, any_layout[ARG_SRC],
                  any_layout[ARG_WEIGHTS], None, any_layout[ARG_DST], *geometry, forward, None)
        made.append(backward)
        return PlainCall(dnnl, backward, {ARG_SRC: plain[ARG_SRC], ARG_DIFF_DST: plain[ARG_DST],
                                          ARG_DIFF_WEIGHTS: plain[ARG_WEIGHTS]},
                         {ARG_DIFF_WEIGHTS})
    finally:
        # The primitives and memory objects made above keep what they need of these.
        for primitive_desc in made:
            dnnl.lib.dnnl_primitive_desc_destroy(primitive_desc)
        for desc in descs:
            dnnl.lib.dnnl_memory_desc_destroy(desc)


def _run(kind, arrays, out, x_shape, w_shape, y_shape, stride, padding, dilation):
    dnnl = library()
    threads = dnnl.threads()
    has_bias = ARG_BIAS in arrays
    key = (kind, x_shape, w_shape, y_shape, has_bias, tuple(stride), tuple(padding),
           tuple(dilation), threads)
    call = cached(key, lambda: _build(kind, dnnl, x_shape, w_shape, y_shape, has_bias,
                                       stride, padding, dilation))
    if call is None:
        return None
    call({**{arg: np.ascontiguousarray(array) for arg, array in arrays.items()},
          _OUTPUT[kind]: out})
    return out


def conv2d(x, weight, bias, stride, padding, dilation, out_size):
    y_shape = (x.shape[0], weight.shape[0]) + tuple(out_size)
    arrays = {ARG_SRC: x, ARG_WEIGHTS: weight}
    if bias is not None:
        arrays[ARG_BIAS] = bias.astype(np.float32, copy=False)
    return _run("forward", arrays, np.empty(y_shape, np.float32), x.shape, weight.shape,
                y_shape, stride, padding, dilation)


def conv_transpose2d(g, weight, input_size, stride, padding, dilation):
    x_shape = (g.shape[0], weight.shape[1]) + tuple(input_size)
    return _run("data", {ARG_DIFF_DST: g, ARG_WEIGHTS: weight}, np.empty(x_shape, np.float32),
                x_shape, weight.shape, g.shape, stride, padding, dilation)


def conv2d_weight(x, g, kernel_size, stride, padding, dilation):
    w_shape = (g.shape[1], x.shape[1]) + tuple(kernel_size)
    return _run("weights", {ARG_SRC: x, ARG_DIFF_DST: g}, np.empty(w_shape, np.float32),
                x.shape, w_shape, g.shape, stride, padding, dilation)
