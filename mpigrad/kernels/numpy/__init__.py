"""The numpy backend's kernels that are longer than a line, registered by op name.

(The one-line forwards stay beside their rules in ops/ and register themselves there.)
"""
from ..backend import NUMPY
from . import (activations, attention, clip, conv, dropout, elementwise, indexing, linalg, loss,
               normalization, optim, reduction, resampling, softmax)

for _name in ("unfold", "fold", "conv2d", "conv_transpose2d", "conv2d_weight", "tap_scatter",
              "tap_gather"):
    NUMPY.register(_name, forward=getattr(conv, _name))
NUMPY.register("max_pool2d", forward=conv.max_pool2d, backward=conv.max_pool2d_backward)
NUMPY.register("erf", forward=elementwise.erf)
for _name in ("upsample_bilinear2d", "upsample_bilinear2d_backward"):
    NUMPY.register(_name, forward=getattr(resampling, _name))
NUMPY.register("relu", forward=elementwise.relu, backward=elementwise.relu_backward)
NUMPY.register("leaky_relu", forward=elementwise.leaky_relu,
               backward=elementwise.leaky_relu_backward)
NUMPY.register("leaky_relu_", forward=elementwise.leaky_relu,
               backward=elementwise.leaky_relu_inplace_backward)
for _name in ("sum", "mean", "amax", "amin", "logsumexp", "scatter_along"):
    NUMPY.register(_name, forward=getattr(reduction, _name))
NUMPY.register("norm", forward=reduction.norm, backward=reduction.norm_backward)
NUMPY.register("mse_loss", forward=loss.mse_loss, backward=loss.mse_loss_backward)
for _name in ("softmax", "log_softmax", "cross_entropy"):
    NUMPY.register(_name, forward=getattr(softmax, _name),
                   backward=getattr(softmax, _name + "_backward"))
NUMPY.register("_masked_softmax", forward=reduction.masked_softmax)
NUMPY.register("index_scatter", forward=indexing.index_scatter)
NUMPY.register("getitem", scatter=indexing.index_add_)
NUMPY.register("scaled_dot_product_attention", forward=attention.attention,
               backward=attention.attention_backward)
NUMPY.register("attention_dropout", forward=attention.attention_dropout)
NUMPY.register("matmul", forward=linalg.product)
NUMPY.register("linear", backward=linalg.linear_backward)
for _name in ("gelu", "silu", "sigmoid", "elu", "softplus"):
    NUMPY.register(_name, forward=getattr(activations, _name),
                   backward=getattr(activations, _name + "_backward"))
NUMPY.register("dropout", forward=dropout.dropout, backward=dropout.dropout_backward)
for _name in ("layer_norm", "rms_norm", "batch_norm"):
    NUMPY.register(_name, forward=getattr(normalization, _name),
                   backward=getattr(normalization, _name + "_backward"))
# Not ops: the optimizers' updates and gradient clipping's passes, by name (optim/ and
# nn/utils/clip_grad.py call them through the backend).
NUMPY.register("sgd_update", forward=optim.sgd_update)
for _name in ("adam", "adamax", "nadam", "radam", "adagrad", "adadelta", "rmsprop"):
    NUMPY.register(_name + "_update", forward=getattr(optim, _name + "_update"))
NUMPY.register("total_norm", forward=clip.total_norm)
NUMPY.register("scale_", forward=clip.scale_)
