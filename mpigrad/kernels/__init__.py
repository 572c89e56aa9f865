"""The backends' array kernels, below the ops: what an op's forward (and, where one exists,
its fused backward) computes on arrays, looked up by the op's name.

A `Backend` is three tables keyed by op name:

- `forwards[name](*arrays, **params) -> array`: the op's forward on its inputs' arrays; or
  `(array, kept)`, where `kept` is what the forward computed on the way that the fused
  backward reads (LayerNorm's mean and rstd, BatchNorm's mean and invstd);
- `backwards[name](needs, g, ans, *inputs, **params) -> (array or None, ...)`: a fused
  backward, one loop for what the op's gradient rules compute in several Tensor passes. It
  serves `create_graph=False` only (the rules run otherwise, so higher-order gradients stay
  exact); `inputs` are the op's saved arrays, or `Meta` (shape and dtype) for unsaved ones;
  `kept=` the forward's kept values, when it returned some;
- `inplace[name](target, *arrays, **params)`: writes the result into `target` (optimizer
  paths with no graph), where the op has one.

`NUMPY` is the default backend. An op built with a forward callable (the one-line numpy
forwards beside their rules, `Op("exp", np.exp, ...)`) puts it into NUMPY's table at
construction; the longer kernels live in `kernels/numpy/` and the compiled loops in
`kernels/compiled/`, and register themselves when `kernels/numpy` is imported. Another array
library plugs in as another Backend filling the same names (see docs/architecture.md).
"""
from .backend import NUMPY, Backend, current, selected, use  # noqa: F401
from . import numpy  # noqa: F401  (registers the numpy backend's kernels)
