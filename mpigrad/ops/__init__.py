"""Differentiable operations: the forward and gradient rules, grouped by kind."""
from .core import Op, apply, inplace, named  # noqa: F401
from .arithmetic import (add, sub, mul, div, neg, pow, matmul, linear, cast, clone,  # noqa: F401
                         eq, ne, lt, le, gt, ge, logical_and, logical_or, logical_not,
                         isnan, isfinite, allclose, isclose, equal, lerp, remainder, fmod)
from .elementwise import (exp, log, sqrt, sin, cos, tanh, abs, sign, sigmoid, relu, erf,  # noqa: F401
                          gelu, silu, clamp, clamp_op, maximum, minimum, where, masked_fill, floor,
                          ceil, round, rsqrt, tril, triu, nan_to_num)
from .reduction import (sum, mean, var, std, norm, amax, amin, max, min, argmax, argmin,  # noqa: F401
                        softmax, log_softmax, logsumexp, take_along_dim, cumsum, prod, sort,
                        argsort, topk, count_nonzero, aminmax, nansum, nanmean)
from .shape import (reshape, flatten, permute, transpose, squeeze, unsqueeze, expand,  # noqa: F401
                    getitem, setitem_, index_put, copy_from, fill_with, cat, concat, stack,
                    split, chunk, pad, index_select, gather, repeat, tile, unbind, broadcast_to,
                    meshgrid, movedim, swapaxes, unflatten, masked_select, tensor_split, hsplit,
                    vsplit, take, trace)
from .reduction import safe_softmax, masked_softmax  # noqa: F401
from .loss import binary_cross_entropy, cross_entropy, mse_loss  # noqa: F401
from .normalization import batch_norm, layer_norm, rms_norm  # noqa: F401
from .regularization import dropout  # noqa: F401
from .attention import scaled_dot_product_attention  # noqa: F401
from .linalg import einsum, bmm, baddbmm, addmm, outer, ger, dot, mv  # noqa: F401
from .indexing import (scatter, scatter_, scatter_add, scatter_add_, index_add,  # noqa: F401
                       index_add_, roll, flip, repeat_interleave, embedding, nonzero,
                       argwhere)
from .activations import (hardtanh, elu, softplus, log_sigmoid, hardsigmoid, hardswish,  # noqa: F401
                          threshold, leaky_relu, leaky_relu_)
from .recurrent import (rnn_tanh, rnn_relu, gru, lstm, lstm_layer, rnn_tanh_cell,  # noqa: F401
                        rnn_relu_cell, gru_cell, lstm_cell)
from .resampling import upsample_bilinear2d, upsample_bilinear2d_backward  # noqa: F401
from . import autocast  # noqa: F401  (installs its first-use hook in dtypes)
