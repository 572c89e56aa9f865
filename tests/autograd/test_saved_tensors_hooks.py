"""Saved-tensor hooks: what is packed, when it is unpacked, nesting, threads, offloading."""
import gc
import threading
import uuid
import weakref

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd
from mpigrad.autograd import Function
from mpigrad.autograd.graph import disable_saved_tensors_hooks, saved_tensors_hooks


class Recorder:
    """Hooks that copy what is saved and count the calls."""

    def __init__(self):
        self.packed, self.unpacked = 0, 0

    def pack(self, tensor):
        self.packed += 1
        return tensor.detach().numpy().copy()

    def unpack(self, array):
        self.unpacked += 1
        return mg.from_numpy(array)


def _model(x, w):
    h = (x @ w).tanh()
    return (h * h).exp().sum()


def test_every_saved_tensor_is_packed_and_unpacked_only_in_backward(float64):
    x = mg.randn(4, 3, requires_grad=True)
    w = mg.randn(3, 3, requires_grad=True)
    want = autograd.grad(_model(x, w), (x, w))
    rec = Recorder()
    with saved_tensors_hooks(rec.pack, rec.unpack):
        loss = _model(x, w)
    # matmul saves x and w, tanh its output, mul h twice, exp its output.
    assert rec.packed == 6 and rec.unpacked == 0
    got = autograd.grad(loss, (x, w))
    assert rec.unpacked == rec.packed
    for g, h in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), h.numpy())


def test_the_graph_keeps_only_what_pack_returns():
    x = mg.randn(64, 64, requires_grad=True)
    with saved_tensors_hooks(lambda t: t.shape, lambda shape: mg.zeros(shape)):
        h = x.exp()
        loss = (h * h).sum()
    alive = weakref.ref(h._array)
    del h
    gc.collect()
    assert alive() is None  # nothing in the graph holds the activation
    loss.backward()  # the unpacked zeros flow through: d/dx of (0 * 0) rules
    assert x.grad is not None


def test_innermost_hooks_win_and_outer_ones_return_after():
    x = mg.randn(3, requires_grad=True)
    outer, inner = Recorder(), Recorder()
    with saved_tensors_hooks(outer.pack, outer.unpack):
        with saved_tensors_hooks(inner.pack, inner.unpack):
            a = x.exp()
        b = a.exp()
    assert (outer.packed, inner.packed) == (1, 1)
    b.sum().backward()
    assert (outer.unpacked, inner.unpacked) == (1, 1)
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.exp(x.data) + x.data), rtol=1e-6)


def test_hooks_are_per_thread():
    rec = Recorder()
    counts = {}

    def other():
        rec_before = rec.packed
        mg.randn(3, requires_grad=True).exp()
        counts["other thread packed"] = rec.packed - rec_before

    with saved_tensors_hooks(rec.pack, rec.unpack):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert counts == {"other thread packed": 0}


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        y = x * x * x
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * 3 * y / x


def test_custom_function_saves_are_packed_and_double_backward_still_works(float64):
    x = mg.tensor([0.5, -1.5, 2.0], requires_grad=True)
    rec = Recorder()
    with saved_tensors_hooks(rec.pack, rec.unpack):
        y = Cube.apply(x)
    assert rec.packed == 2
    (g,) = autograd.grad(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.data ** 2)
    # The unpacked x and y stand where the saved ones were in the graph: d(3y/x)/dx = 6x.
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.data)


def test_double_backward_through_packed_op_tensors_matches_torch(float64):
    torch = pytest.importorskip("torch")
    xs = np.random.default_rng(0).standard_normal((4, 3))
    ws = np.random.default_rng(1).standard_normal((3, 3))
    results = []
    for lib, hooks in ((mg, saved_tensors_hooks),
                       (torch, torch.autograd.graph.saved_tensors_hooks)):
        x = lib.tensor(xs, requires_grad=True)
        w = lib.tensor(ws, requires_grad=True)
        with hooks(lambda t: t.detach().clone(), lambda t: t):
            loss = _model(x, w)
        gx, gw = lib.autograd.grad(loss, (x, w), create_graph=True)
        ((gx * gx).sum() + (gw ** 3).sum()).backward()
        results.append([x.grad.detach().numpy(), w.grad.detach().numpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_in_place_change_of_a_saved_tensor_is_still_detected():
    x = mg.randn(3, requires_grad=True)
    rec = Recorder()
    with saved_tensors_hooks(rec.pack, rec.unpack):
        h = x * 1.0
        y = (h * h).sum()
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


def test_unpack_must_return_a_tensor():
    x = mg.randn(3, requires_grad=True)
    with saved_tensors_hooks(lambda t: t, lambda t: t.detach().numpy()):
        y = x.exp().sum()
    with pytest.raises(TypeError, match="must return a Tensor, got ndarray"):
        y.backward()


def test_disable_saved_tensors_hooks_refuses_them_with_its_message():
    with disable_saved_tensors_hooks("no hooks in this region"):
        with pytest.raises(RuntimeError, match="no hooks in this region"):
            with saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with saved_tensors_hooks(lambda t: t, lambda t: t):
        pass


class SaveOnDisk(saved_tensors_hooks):
    """The offloading example of the docs: each saved tensor goes to a .npy file in `directory`
    and comes back as a read-only memory map when backward reaches it."""

    def __init__(self, directory):
        self.directory = directory
        super().__init__(self._pack, self._unpack)

    def _pack(self, tensor):
        path = self.directory / f"{uuid.uuid4().hex}.npy"
        np.save(path, tensor.detach().numpy())
        return path

    @staticmethod
    def _unpack(path):
        return mg.from_numpy(np.load(path, mmap_mode="r"))


def test_save_on_disk_gives_the_same_gradients_and_keeps_nothing_in_memory(tmp_path):
    rng = np.random.default_rng(3)
    layers = [(mg.tensor(rng.standard_normal((32, 32)) / 6, requires_grad=True),
               mg.tensor(np.zeros(32), requires_grad=True)) for _ in range(4)]
    x = mg.tensor(rng.standard_normal((16, 32)))

    def forward(keep):
        h = x
        for w, b in layers:
            h = mg.ops.linear(h, w, b).tanh()
            keep.append(weakref.ref(h._array))
        return (h * h).sum()

    want = autograd.grad(forward([]), [p for layer in layers for p in layer])
    activations = []
    with SaveOnDisk(tmp_path):
        loss = forward(activations)
    gc.collect()
    assert all(ref() is None for ref in activations)
    assert len(list(tmp_path.glob("*.npy"))) >= 3 * len(layers)
    got = autograd.grad(loss, [p for layer in layers for p in layer])
    for g, h in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), h.numpy())
