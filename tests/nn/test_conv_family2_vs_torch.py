"""More of the convolution family against torch in float64: grouped and depthwise
convolutions, transposed convolutions, padding modes, pooling, normalisation, resampling,
Bilinear and EmbeddingBag."""
import numpy as np
import pytest

import mpigrad
from mpigrad import nn
from mpigrad.nn import functional as F

from .test_conv_family_vs_torch import _check_module_against_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _tol(ours, theirs, what=""):
    ours = ours.detach().numpy() if isinstance(ours, mpigrad.Tensor) else np.asarray(ours)
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-10, atol=1e-10,
                               err_msg=what)


def _pair(module_cls, *args, **kwargs):
    """Our module and torch's with the same arguments; torch's state dict loaded into ours."""
    theirs = getattr(torch.nn, module_cls)(*args, dtype=torch.float64, **kwargs)
    ours = getattr(nn, module_cls)(*args, dtype=mpigrad.float64, **kwargs)
    ours.load_state_dict({k: mpigrad.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


def _leaves(rng, *shapes):
    arrays = [rng.standard_normal(s) for s in shapes]
    return ([mpigrad.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _check_function(ours, theirs, shapes, seed=0):
    """ours(*tensors) against theirs(*tensors): output and every input's gradient."""
    rng = np.random.default_rng(seed)
    mine, reference = _leaves(rng, *shapes)
    yo, yt = ours(*mine), theirs(*reference)
    _tol(yo, yt, "output")
    g = rng.standard_normal(tuple(yt.shape))
    yo.backward(mpigrad.tensor(g))
    yt.backward(torch.tensor(g))
    for i, (a, b) in enumerate(zip(mine, reference)):
        _tol(a.grad, b.grad, f"gradient of input {i}")


# ----------------------------------------------------------------------------- grouped
@pytest.mark.parametrize("cin, cout, groups, kernel, kwargs", [
    (4, 4, 4, 3, dict(padding=1)),                              # depthwise
    (4, 8, 4, 3, dict(stride=2, padding=1)),                    # multiplier 2, strided
    (6, 6, 3, (3, 2), dict(padding=(2, 0), dilation=2)),
    (4, 4, 4, 3, dict(stride=2)),
    (4, 12, 4, 2, dict(stride=(1, 2), padding=1, dilation=(2, 1))),
    (4, 4, 4, 3, dict(padding=3)),                              # padding beyond the kernel
    (8, 4, 2, 3, dict(stride=2, padding=2)),
])
def test_grouped_conv2d_matches_torch(cin, cout, groups, kernel, kwargs):
    ours, theirs = _pair("Conv2d", cin, cout, kernel, groups=groups, **kwargs)
    _check_module_against_torch(ours, theirs,
                                np.random.default_rng(1).standard_normal((2, cin, 7, 6)))
