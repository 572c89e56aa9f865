"""Small models, data and single-process oracles shared by the DDP tests and scenarios."""
import numpy as np

import mpigrad as mg
from mpigrad import nn, ops


def init_array(rng, *shape):
    return rng.standard_normal(shape) / np.sqrt(shape[-1])


class MLP(nn.Module):
    """Linear layers with tanh between them; parameters initialized from `seed`."""

    def __init__(self, sizes=(5, 7, 6, 3), seed=0, dtype=np.float64, extra=False):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.n = len(sizes) - 1
        for k in range(self.n):
            setattr(self, f"w{k}", nn.Parameter(init_array(rng, sizes[k + 1], sizes[k]).astype(dtype)))
            setattr(self, f"b{k}", nn.Parameter((0.1 * rng.standard_normal(sizes[k + 1])).astype(dtype)))
        if extra:
            self.extra = nn.Parameter(rng.standard_normal(sizes[-1]).astype(dtype))
        self.use_extra = True

    def forward(self, x):
        for k in range(self.n):
            x = ops.linear(x, getattr(self, f"w{k}"), getattr(self, f"b{k}"))
            if k < self.n - 1:
                x = ops.tanh(x)
        if "extra" in self._parameters and self.use_extra:
            x = x + self.extra
        return x


def mse(out, y):
    return ((out - y) ** 2).mean()


def cross_entropy(logits, labels):
    logp = mg.log_softmax(logits, dim=1)
    picked = mg.take_along_dim(logp, mg.tensor(labels.reshape(-1, 1)), dim=1)
    return -picked.mean()


def regression_data(n, d_in=5, d_out=3, seed=1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d_in)).astype(dtype), rng.standard_normal((n, d_out)).astype(dtype)


def blobs(n, d=8, classes=3, seed=2, dtype=np.float64, spread=2.0):
    rng = np.random.default_rng(seed)
    centers = spread * rng.standard_normal((classes, d))
    labels = rng.integers(0, classes, n)
    x = centers[labels] + rng.standard_normal((n, d))
    return x.astype(dtype), labels.astype(np.int64)


def params_of(model):
    return [p._array.copy() for p in model.parameters()]
