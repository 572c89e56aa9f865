"""Bilinear resampling of images and its adjoint, each the other's vector-Jacobian product
(both are linear), so F.interpolate(mode="bilinear") is differentiable to any order; kernels
in kernels/numpy/resampling.py. `positions` is (rows, columns), each torch's (first, second,
weight of the second) source indices along its axis."""
from .core import Op

upsample_bilinear2d = Op(
    "upsample_bilinear2d", None,
    (lambda g, ans, x, positions:
     upsample_bilinear2d_backward(g, positions=positions, input_size=x.shape[2:]),),
    (lambda t, ans, x, positions: upsample_bilinear2d(t, positions=positions),),
    grad_fn_name="UpsampleBilinear2DBackward0")

upsample_bilinear2d_backward = Op(
    "upsample_bilinear2d_backward", None,
    (lambda gg, ans, g, positions, input_size: upsample_bilinear2d(gg, positions=positions),),
    (lambda t, ans, g, positions, input_size:
     upsample_bilinear2d_backward(t, positions=positions, input_size=input_size),))
