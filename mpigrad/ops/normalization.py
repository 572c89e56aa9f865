"""LayerNorm and RMSNorm over the trailing `dims` dimensions, and BatchNorm in training over
all dimensions but the channels (1), each one op: the forward and a fused backward are loops
(kernels/numpy/normalization.py), the forward keeping the statistics the backward reads; the
rules here, written with ops, serve create_graph=True and tangents.

With xhat the normalised input (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased
variance) over the normalised axes, or x * rrms for RMSNorm, rrms = 1 / sqrt(mean(x^2) + eps),
and gw = g * weight:

    layer_norm, batch_norm: dx = rstd (gw - mean(gw) - xhat mean(gw xhat)),
                            dweight = g xhat, dbias = g
    rms_norm:               dx = rrms (gw - xhat mean(gw xhat)), dweight = g xhat

(dweight and dbias summed over the other dimensions).
"""
from .core import Op


def _trailing(x, dims):
    return tuple(range(len(x.shape) - dims, len(x.shape)))


def _around_channels(x):
    return (0,) + tuple(range(2, len(x.shape)))


def _normalized(x, axes, eps):
    mean = x.mean(axes, keepdim=True)
    rstd = (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return (x - mean) * rstd, rstd


def _weighted(g, weight):
    return g if weight is None else g * weight


def _projection(v, x, axes, eps):
    # d xhat / dx applied to v: symmetric, so it serves gradients and tangents alike.
    xhat, rstd = _normalized(x, axes, eps)
    return rstd * (v - v.mean(axes, keepdim=True) - xhat * (v * xhat).mean(axes, keepdim=True))


layer_norm = Op(
    "layer_norm", None,
    (lambda g, ans, x, weight, bias, dims, eps:
     _projection(_weighted(g, weight), x, _trailing(x, dims), eps),
     lambda g, ans, x, weight, bias, dims, eps: g * _normalized(x, _trailing(x, dims), eps)[0],
     lambda g, ans, x, weight, bias, dims, eps: g),
    (lambda t, ans, x, weight, bias, dims, eps:
     _weighted(_projection(t, x, _trailing(x, dims), eps), weight),
     lambda t, ans, x, weight, bias, dims, eps: t * _normalized(x, _trailing(x, dims), eps)[0],
     lambda t, ans, x, weight, bias, dims, eps: t),
    saves="x weight", grad_fn_name="NativeLayerNormBackward0")


def _rms_norm_parts(x, dims, eps):
    axes = _trailing(x, dims)
    rrms = ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return x * rrms, rrms, axes


def _rms_norm_projection(v, x, dims, eps):
    xhat, rrms, axes = _rms_norm_parts(x, dims, eps)
    return rrms * (v - xhat * (v * xhat).mean(axes, keepdim=True))


rms_norm = Op(
    "rms_norm", None,
    (lambda g, ans, x, weight, dims, eps: _rms_norm_projection(_weighted(g, weight), x, dims, eps),
     lambda g, ans, x, weight, dims, eps: g * _rms_norm_parts(x, dims, eps)[0]),
    (lambda t, ans, x, weight, dims, eps: _weighted(_rms_norm_projection(t, x, dims, eps), weight),
     lambda t, ans, x, weight, dims, eps: t * _rms_norm_parts(x, dims, eps)[0]),
    saves="x weight", grad_fn_name="FusedRmsNormBackward0")


def _per_channel(v, x):
    """A (C,) vector shaped to broadcast over x's channel dimension."""
    return None if v is None else v.reshape((x.shape[1],) + (1,) * (len(x.shape) - 2))


def _channel_xhat(x, eps):
    return _normalized(x, _around_channels(x), eps)[0]


# `running` = (running_mean, running_var, momentum) arrays the forward kernel moves in place,
# or None; the rules do not read it.
batch_norm = Op(
    "batch_norm", None,
    (lambda g, ans, x, weight, bias, eps, running:
     _projection(_weighted(g, _per_channel(weight, x)), x, _around_channels(x), eps),
     lambda g, ans, x, weight, bias, eps, running:
     (g * _channel_xhat(x, eps)).sum(_around_channels(x)),
     lambda g, ans, x, weight, bias, eps, running: g.sum(_around_channels(g))),
    (lambda t, ans, x, weight, bias, eps, running:
     _weighted(_projection(t, x, _around_channels(x), eps), _per_channel(weight, x)),
     lambda t, ans, x, weight, bias, eps, running: _per_channel(t, x) * _channel_xhat(x, eps),
     lambda t, ans, x, weight, bias, eps, running: _per_channel(t, x)),
    saves="x weight", grad_fn_name="NativeBatchNormBackward0")
