"""Sliding windows: im2col and col2im, convolution, max pooling; their kernels are in
kernels/numpy/conv.py.

The ops come in adjoint families, each member the others' vector-Jacobian product, so
convolution and pooling are differentiable to any order, in both modes (each op's tangent
rule applies a member of its family to the tangent):

- `unfold` (im2col) and `fold` (col2im), torch's F.unfold and F.fold;
- `conv2d`, `conv_transpose2d` (its gradient for the input) and `conv2d_weight` (for the
  weight);
- `max_pool2d` with `tap_scatter` and `tap_gather`: the forward kernel keeps each window's
  winning tap (the first maximum, as torch) for the fused backward, which sends the gradient
  there; the rules (create_graph, tangents) find the winners again.

Sizes are (height, width) pairs.
"""
from ..kernels.numpy.conv import kernel_extent, sliding_output_size, winning_taps  # noqa: F401
from .core import Op

unfold = Op("unfold", None,
            (lambda g, ans, x, kernel_size, dilation, padding, stride:
             fold(g, output_size=x.shape[2:], kernel_size=kernel_size, dilation=dilation,
                  padding=padding, stride=stride),),
            (lambda t, ans, x, kernel_size, dilation, padding, stride:
             unfold(t, kernel_size=kernel_size, dilation=dilation, padding=padding,
                    stride=stride),))

fold = Op("fold", None,
          (lambda g, ans, cols, output_size, kernel_size, dilation, padding, stride:
           unfold(g, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride),),
          (lambda t, ans, cols, output_size, kernel_size, dilation, padding, stride:
           fold(t, output_size=output_size, kernel_size=kernel_size, dilation=dilation,
                padding=padding, stride=stride),))


conv2d = Op("conv2d", None,
            (lambda g, ans, x, weight, bias, stride, padding, dilation, groups=1:
             conv_transpose2d(g, weight, input_size=x.shape[2:], stride=stride, padding=padding,
                              dilation=dilation, groups=groups),
             lambda g, ans, x, weight, bias, stride, padding, dilation, groups=1:
             conv2d_weight(x, g, kernel_size=weight.shape[2:], stride=stride, padding=padding,
                           dilation=dilation, groups=groups),
             lambda g, ans, x, weight, bias, stride, padding, dilation, groups=1:
             g.sum((0, 2, 3))),
            # Bilinear in (x, weight), linear in the bias: each tangent through the op itself.
            (lambda t, ans, x, weight, bias, stride, padding, dilation, groups=1:
             conv2d(t, weight, None, stride=stride, padding=padding, dilation=dilation,
                    groups=groups),
             lambda t, ans, x, weight, bias, stride, padding, dilation, groups=1:
             conv2d(x, t, None, stride=stride, padding=padding, dilation=dilation,
                    groups=groups),
             lambda t, ans, x, weight, bias, stride, padding, dilation, groups=1:
             t.reshape(-1, 1, 1)),
            saves="x weight")

conv_transpose2d = Op(
    "conv_transpose2d", None,
    (lambda gg, ans, g, weight, input_size, stride, padding, dilation, groups=1:
     conv2d(gg, weight, None, stride=stride, padding=padding, dilation=dilation,
            groups=groups),
     lambda gg, ans, g, weight, input_size, stride, padding, dilation, groups=1:
     conv2d_weight(gg, g, kernel_size=weight.shape[2:], stride=stride, padding=padding,
                   dilation=dilation, groups=groups)),
    (lambda t, ans, g, weight, input_size, stride, padding, dilation, groups=1:
     conv_transpose2d(t, weight, input_size=input_size, stride=stride, padding=padding,
                      dilation=dilation, groups=groups),
     lambda t, ans, g, weight, input_size, stride, padding, dilation, groups=1:
     conv_transpose2d(g, t, input_size=input_size, stride=stride, padding=padding,
                      dilation=dilation, groups=groups)),
    saves="g weight")

conv2d_weight = Op(
    "conv2d_weight", None,
    (lambda gw, ans, x, g, kernel_size, stride, padding, dilation, groups=1:
     conv_transpose2d(g, gw, input_size=x.shape[2:], stride=stride, padding=padding,
                      dilation=dilation, groups=groups),
     lambda gw, ans, x, g, kernel_size, stride, padding, dilation, groups=1:
     conv2d(x, gw, None, stride=stride, padding=padding, dilation=dilation,
            groups=groups)),
    (lambda t, ans, x, g, kernel_size, stride, padding, dilation, groups=1:
     conv2d_weight(t, g, kernel_size=kernel_size, stride=stride, padding=padding,
                   dilation=dilation, groups=groups),
     lambda t, ans, x, g, kernel_size, stride, padding, dilation, groups=1:
     conv2d_weight(x, t, kernel_size=kernel_size, stride=stride, padding=padding,
                   dilation=dilation, groups=groups)),
    saves="x g")


max_pool2d = Op(
    "max_pool2d", None,
    (lambda g, ans, x, kernel_size, stride, padding, dilation, extra:
     tap_scatter(g, winners=winning_taps(x._array, kernel_size, stride, padding, dilation,
                                         extra),
                 input_size=x.shape[2:], kernel_size=kernel_size, stride=stride,
                 padding=padding, dilation=dilation, extra=extra),),
    # The tangent at each window's winning tap.
    (lambda t, ans, x, kernel_size, stride, padding, dilation, extra:
     tap_gather(t, winners=winning_taps(x._array, kernel_size, stride, padding, dilation,
                                        extra),
                kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
                extra=extra),),
    saves="x")

# Sends each window's gradient to its winning tap; the adjoint of tap_gather.
tap_scatter = Op(
    "tap_scatter", None,
    (lambda gg, ans, g, winners, input_size, kernel_size, stride, padding, dilation, extra:
     tap_gather(gg, winners=winners, kernel_size=kernel_size, stride=stride, padding=padding,
                dilation=dilation, extra=extra),),
    (lambda t, ans, g, winners, input_size, kernel_size, stride, padding, dilation, extra:
     tap_scatter(t, winners=winners, input_size=input_size, kernel_size=kernel_size,
                 stride=stride, padding=padding, dilation=dilation, extra=extra),))

# Picks each window's winning tap.
tap_gather = Op(
    "tap_gather", None,
    (lambda gg, ans, x, winners, kernel_size, stride, padding, dilation, extra:
     tap_scatter(gg, winners=winners, input_size=x.shape[2:], kernel_size=kernel_size,
                 stride=stride, padding=padding, dilation=dilation, extra=extra),),
    (lambda t, ans, x, winners, kernel_size, stride, padding, dilation, extra:
     tap_gather(t, winners=winners, kernel_size=kernel_size, stride=stride, padding=padding,
                dilation=dilation, extra=extra),))
