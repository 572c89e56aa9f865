"""The backend seam: every op runs the selected backend's kernel by name, a fused backward
serves create_graph=False only, and a backend says which ops it cannot run yet."""
import collections

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import kernels
from mpigrad.autograd import forward_ad as fwAD
from mpigrad.ops.core import REGISTRY


class CountingBackend(kernels.Backend):
    """numpy's kernels, each call counted by name: a stand-in for a second array library."""

    def __init__(self):
        super().__init__("counting")
        self.calls = collections.Counter()
        for kind in ("forwards", "backwards", "inplace"):
            for name, kernel in getattr(kernels.NUMPY, kind).items():
                getattr(self, kind)[name] = self._counted(f"{kind}:{name}", kernel)

    def _counted(self, key, kernel):
        def counted(*args, **kwargs):
            self.calls[key] += 1
            return kernel(*args, **kwargs)
        return counted


@pytest.fixture
def backend():
    counting = CountingBackend()
    previous = kernels.use(counting)
    yield counting
    kernels.use(previous)


def test_ops_run_the_selected_backends_kernels(backend):
    x = mg.tensor(np.linspace(-2, 2, 12).reshape(3, 4), requires_grad=True)
    y = mg.nn.functional.gelu(x.exp() + 1).softmax(1)
    y.sum().backward()
    assert backend.calls["forwards:exp"] == 1
    assert backend.calls["forwards:gelu"] == 1
    assert backend.calls["forwards:softmax"] == 1
    assert backend.calls["backwards:softmax"] == 1 and backend.calls["backwards:gelu"] == 1
    assert kernels.current() is backend


def test_a_fused_backward_serves_only_first_order_gradients(backend):
    x = mg.tensor([0.3, -1.2, 2.0], requires_grad=True)
    (g,) = mg.autograd.grad(mg.nn.functional.gelu(x).sum(), x, create_graph=True)
    assert backend.calls["backwards:gelu"] == 0  # the rules ran, building a graph
    g.sum().backward()
    assert x.grad is not None and backend.calls["backwards:gelu"] == 0
    with fwAD.dual_level():
        dual = fwAD.make_dual(mg.tensor([0.3, -1.2]), mg.tensor([1.0, 1.0]))
        assert fwAD.unpack_dual(mg.nn.functional.gelu(dual)).tangent is not None
    assert backend.calls["backwards:gelu"] == 0


def test_a_backend_lists_what_it_lacks_and_refuses_a_second_kernel():
    empty = kernels.Backend("empty")
    assert empty.missing(REGISTRY) == sorted(REGISTRY)
    assert kernels.NUMPY.missing(REGISTRY) == []
    empty.register("exp", forward=np.exp)
    with pytest.raises(ValueError, match="one runtime path"):
        empty.register("exp", forward=np.sin)
    with pytest.raises(TypeError):
        kernels.use("numpy")
