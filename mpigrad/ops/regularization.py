"""Dropout as one op: x times a mask drawn from (seed, position) by the backend's kernel, so
nothing but the seed is kept for backward. Linear and diagonal in x: its gradient (and
tangent) is the same dropout of g (of t), which the fused backward runs as one pass and
create_graph records as this op again."""
from .core import Op

dropout = Op(
    "dropout", None,
    (lambda g, ans, x, p, seed, span: dropout(g, p=p, seed=seed, span=span),),
    elementwise=True, grad_fn_name="MulBackward0")
