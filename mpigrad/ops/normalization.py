"""LayerNorm and RMSNorm over the trailing `dims` dimensions, each one op: the forward and a
fused backward are loops over rows (kernels/numpy/normalization.py); the rules here, written
with ops, serve create_graph=True and tangents.

With xhat the normalised input (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased
variance), or x * rrms for RMSNorm, rrms = 1 / sqrt(mean(x^2) + eps), and gw = g * weight:

    layer_norm: dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), dweight = g xhat, dbias = g
    rms_norm:   dx = rrms (gw - xhat mean(gw xhat)),            dweight = g xhat

(dweight and dbias summed over the leading dimensions by reduce_to).
"""
from .core import Op


def _trailing(x, dims):
    return tuple(range(len(x.shape) - dims, len(x.shape)))


def _layer_norm_parts(x, dims, eps):
    axes = _trailing(x, dims)
    mean = x.mean(axes, keepdim=True)
    rstd = (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return (x - mean) * rstd, rstd, axes


def _weighted(g, weight):
    return g if weight is None else g * weight


def _layer_norm_projection(v, x, dims, eps):
    # d xhat / dx applied to v: symmetric, so it serves gradients and tangents alike.
    xhat, rstd, axes = _layer_norm_parts(x, dims, eps)
    return rstd * (v - v.mean(axes, keepdim=True) - xhat * (v * xhat).mean(axes, keepdim=True))


layer_norm = Op(
    "layer_norm", None,
    (lambda g, ans, x, weight, bias, dims, eps:
     _layer_norm_projection(_weighted(g, weight), x, dims, eps),
     lambda g, ans, x, weight, bias, dims, eps: g * _layer_norm_parts(x, dims, eps)[0],
     lambda g, ans, x, weight, bias, dims, eps: g),
    (lambda t, ans, x, weight, bias, dims, eps:
     _weighted(_layer_norm_projection(t, x, dims, eps), weight),
     lambda t, ans, x, weight, bias, dims, eps: t * _layer_norm_parts(x, dims, eps)[0],
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
