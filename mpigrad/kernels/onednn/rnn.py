"""One LSTM layer in one direction on oneDNN's LSTM primitive, forward (training) and
backward: what torch's CPU LSTM runs (`mkldnn_rnn_layer`). The input projection of every
step and the recurrence are one call, and so is their backward, which reads the workspace
the forward left (the gates and cell states, in oneDNN's own layout).

torch's weights are read where they are: W_ih (4H, I) and W_hh (4H, H) are oneDNN's "ldgoi"
layout with L = D = 1, in the same gate order (i, f, g, o). The primitive takes one bias,
b_ih + b_hh, and gives one bias gradient, which is both biases'. The weights are reordered
into oneDNN's layout on every call, as torch does; the primitives themselves are built once
per geometry and thread count (_primitive.py).
"""
import ctypes

import numpy as np

from . import (ARG_BIAS, ARG_DIFF_DST, ARG_DIFF_SRC, ARG_DIFF_WEIGHTS, ARG_DST, ARG_SRC,
               ARG_WEIGHTS, ANY_LAYOUT, FORWARD_INFERENCE, FORWARD_TRAINING, Pointer,
               library)
from ._primitive import PlainCall, cached

BACKWARD = 128
LEFT_TO_RIGHT, RIGHT_TO_LEFT = 1, 2  # dnnl_unidirectional_*
TNC, LDNC, LDGOI, LDGO = 4, 5, 31, 5  # dnnl_format_tag_t
OVERWRITE_DIFF_WEIGHTS = 1  # dnnl_rnn_flags_diff_weights_overwrite: by default they add up
ARG_SRC_ITER, ARG_SRC_ITER_C, ARG_DST_ITER, ARG_DST_ITER_C = 2, 3, 18, 19
ARG_WEIGHTS_ITER, ARG_WORKSPACE, ARG_DIFF_BIAS = 34, 64, 169
ARG_DIFF_SRC_ITER, ARG_DIFF_SRC_ITER_C = 130, 131
ARG_DIFF_DST_ITER, ARG_DIFF_DST_ITER_C = 146, 147
ARG_DIFF_WEIGHTS_ITER = 162


def takes(arrays, batch_sizes):
    """Whether oneDNN runs this layer: float32 arrays, every step with the whole batch (a
    padded batch, not packed sequences of different lengths), a batch of at least one, and
    oneDNN loaded."""
    return (batch_sizes[-1] == batch_sizes[0] > 0 and all(a.dtype == np.float32 for a in arrays)
            and library() is not None)


class _Layer:
    """The PlainCalls of one geometry: for training, the forward (which leaves a workspace of
    `workspace_bytes`) and the backward; otherwise the inference forward alone, which writes
    no workspace (0.9 of the training forward's time on the word LM's layers; its last bits
    differ, as torch's do between its forward with and without grad mode)."""

    def __init__(self, dnnl, steps, batch, inputs, size, reverse, training):
        def desc(shape, layout):
            made.append(dnnl.desc(shape, layout))
            return made[-1]

        made, primitive_descs = [], []
        weights_shape, iter_shape = (1, 1, inputs, 4, size), (1, 1, size, 4, size)
        state = (1, 1, batch, size)
        plain_descs = {ARG_SRC: desc((steps, batch, inputs), TNC),
                       ARG_SRC_ITER: desc(state, LDNC), ARG_SRC_ITER_C: desc(state, LDNC),
                       ARG_WEIGHTS: desc(weights_shape, LDGOI),
                       ARG_WEIGHTS_ITER: desc(iter_shape, LDGOI),
                       ARG_BIAS: desc((1, 1, 4, size), LDGO),
                       ARG_DST: desc((steps, batch, size), TNC),
                       ARG_DST_ITER: desc(state, LDNC), ARG_DST_ITER_C: desc(state, LDNC)}

        def lstm_descs():
            """The layouts of an LSTM's eleven arguments (or their gradients') in the C API's
            order: plain, but the weights', which the primitive picks (no peephole, no
            projection)."""
            return (plain_descs[ARG_SRC], plain_descs[ARG_SRC_ITER],
                    plain_descs[ARG_SRC_ITER_C], desc(weights_shape, ANY_LAYOUT),
                    desc(iter_shape, ANY_LAYOUT), None, None, plain_descs[ARG_BIAS],
                    plain_descs[ARG_DST], plain_descs[ARG_DST_ITER], plain_descs[ARG_DST_ITER_C])

        direction = RIGHT_TO_LEFT if reverse else LEFT_TO_RIGHT
        try:
            forward = Pointer()
            dnnl.call("dnnl_lstm_forward_primitive_desc_create", ctypes.byref(forward),
                      dnnl.engine, FORWARD_TRAINING if training else FORWARD_INFERENCE,
                      direction, *lstm_descs(), 0, None)
            primitive_descs.append(forward)
            if not training:
                self.forward = PlainCall(dnnl, forward, plain_descs,
                                         {ARG_DST, ARG_DST_ITER, ARG_DST_ITER_C})
                return
            workspace = dnnl.chosen_desc(forward, ARG_WORKSPACE)
            self.workspace_bytes = dnnl.bytes(workspace)
            self.forward = PlainCall(
                dnnl, forward, {**plain_descs, ARG_WORKSPACE: workspace},
                {ARG_DST, ARG_DST_ITER, ARG_DST_ITER_C, ARG_WORKSPACE})
            backward = Pointer()
            dnnl.call("dnnl_lstm_backward_primitive_desc_create", ctypes.byref(backward),
                      dnnl.engine, BACKWARD, direction, *lstm_descs(), *lstm_descs(),
                      OVERWRITE_DIFF_WEIGHTS, forward, None)
            primitive_descs.append(backward)
            gradient_of = {ARG_SRC: ARG_DIFF_SRC, ARG_SRC_ITER: ARG_DIFF_SRC_ITER,
                           ARG_SRC_ITER_C: ARG_DIFF_SRC_ITER_C, ARG_WEIGHTS: ARG_DIFF_WEIGHTS,
                           ARG_WEIGHTS_ITER: ARG_DIFF_WEIGHTS_ITER, ARG_BIAS: ARG_DIFF_BIAS,
                           ARG_DST: ARG_DIFF_DST, ARG_DST_ITER: ARG_DIFF_DST_ITER,
                           ARG_DST_ITER_C: ARG_DIFF_DST_ITER_C}
            gradients = {gradient_of[arg]: plain_descs[arg] for arg in gradient_of}
            self.backward = PlainCall(
                dnnl, backward, {**plain_descs, ARG_WORKSPACE: workspace, **gradients},
                {gradient_of[arg] for arg in (ARG_SRC, ARG_SRC_ITER, ARG_SRC_ITER_C,
                                              ARG_WEIGHTS, ARG_WEIGHTS_ITER, ARG_BIAS)})
        finally:
            for primitive_desc in primitive_descs:
                dnnl.lib.dnnl_primitive_desc_destroy(primitive_desc)
            for desc in made:
                dnnl.lib.dnnl_memory_desc_destroy(desc)


def _layer(x, w_hh, reverse, training=True):
    """The _Layer of this geometry (None where oneDNN has no implementation for it)."""
    dnnl = library()
    size, threads = w_hh.shape[1], dnnl.threads()
    return cached(("lstm", x.shape, size, reverse, training, threads),
                  lambda: _Layer(dnnl, *x.shape, size, reverse, training))


def lstm_forward(x, h0, c0, w_ih, w_hh, bias, reverse, out, training=True):
    """Runs the layer on x (T, N, I) from h0 and c0 (N, H), with bias = b_ih + b_hh, all
    float32 and C-contiguous. `out` ((T + 1) N, H) receives every step's h, then c_n. Returns
    what lstm_backward needs besides the output (an empty tuple when not `training`: there
    is no backward), or None where oneDNN has no implementation for it."""
    layer = _layer(x, w_hh, reverse, training)
    if layer is None:
        return None
    steps, batch, _ = x.shape
    h_n = np.empty(h0.shape, np.float32)
    arrays = {ARG_SRC: x, ARG_SRC_ITER: h0, ARG_SRC_ITER_C: c0, ARG_WEIGHTS: w_ih,
              ARG_WEIGHTS_ITER: w_hh, ARG_BIAS: bias,
              ARG_DST: out[:steps * batch].reshape(steps, batch, -1), ARG_DST_ITER: h_n,
              ARG_DST_ITER_C: out[steps * batch:]}
    if not training:
        layer.forward(arrays)
        return ()
    workspace = np.empty(layer.workspace_bytes, np.uint8)
    layer.forward({**arrays, ARG_WORKSPACE: workspace})
    return x, h0, c0, w_ih, w_hh, bias, h_n, workspace


def lstm_backward(kept, out, g, reverse):
    """(dx, dh0, dc0, dW_ih, dW_hh, d_bias) from what lstm_forward returned (`kept`), its
    output `out` and that output's gradient `g` (C-contiguous, float32). The final h's
    gradient is among the steps' (it is the last step's h)."""
    x, h0, c0, w_ih, w_hh, bias, h_n, workspace = kept
    layer = _layer(x, w_hh, reverse)
    steps, batch, _ = x.shape
    rows = steps * batch
    grads = (np.empty_like(x), np.empty_like(h0), np.empty_like(c0), np.empty_like(w_ih),
             np.empty_like(w_hh), np.empty_like(bias))
    layer.backward({ARG_SRC: x, ARG_SRC_ITER: h0, ARG_SRC_ITER_C: c0, ARG_WEIGHTS: w_ih,
                    ARG_WEIGHTS_ITER: w_hh, ARG_BIAS: bias,
                    ARG_DST: out[:rows].reshape(steps, batch, -1), ARG_DST_ITER: h_n,
                    ARG_DST_ITER_C: out[rows:], ARG_WORKSPACE: workspace,
                    ARG_DIFF_DST: g[:rows].reshape(steps, batch, -1),
                    ARG_DIFF_DST_ITER: np.zeros_like(h_n), ARG_DIFF_DST_ITER_C: g[rows:],
                    **dict(zip((ARG_DIFF_SRC, ARG_DIFF_SRC_ITER, ARG_DIFF_SRC_ITER_C,
                                ARG_DIFF_WEIGHTS, ARG_DIFF_WEIGHTS_ITER, ARG_DIFF_BIAS),
                               grads))})
    return grads
