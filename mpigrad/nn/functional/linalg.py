"""Linear and bilinear maps."""
from ... import ops


def linear(input, weight, bias=None):
    """y = x W^T + b with W of shape (out_features, in_features), as one fused node."""
    if input.shape[-1:] != weight.shape[1:]:
        raise RuntimeError(f"linear: expected input with last dimension {weight.shape[1]}, got "
                           f"shape {tuple(input.shape)}")
    return ops.linear(input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = input1[..., :] A_o input2[..., :] + b_o with weight (out, in1, in2): one
    product with the weight's slices side by side, then a contraction with input2."""
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, got "
                           f"{weight.ndim} dimensions")
    out_features, in1, in2 = weight.shape
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and "
                           f"{input2.ndim}")
    for dim, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {dim}: "
                               f"got {a} and {b}")
    for name, size, expected in (("input1", input1.shape[-1], in1),
                                 ("input2", input2.shape[-1], in2),
                                 ("bias", None if bias is None else bias.shape[-1],
                                  out_features)):
        if size is not None and size != expected:
            raise RuntimeError(f"bilinear(): {name} size does not match weight size: got {size} "
                               f"but expected {expected}")
    batch = tuple(input1.shape[:-1])
    left = input1 @ weight.permute(1, 0, 2).reshape(in1, out_features * in2)
    out = (left.reshape(*batch, out_features, in2) * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias
