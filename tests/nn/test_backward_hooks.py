"""Module full backward hooks and pre-hooks, against torch."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)
W, B, X = RNG.standard_normal((3, 4)), RNG.standard_normal(3), RNG.standard_normal((2, 4))


def _linear(lib):
    layer = lib.nn.Linear(4, 3).double()
    layer.weight = lib.nn.Parameter(lib.tensor(W.copy()))
    layer.bias = lib.nn.Parameter(lib.tensor(B.copy()))
    return layer


def _np(values):
    return [None if v is None else v.detach().numpy().copy() for v in values]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-12)


def _run(lib, input_requires_grad, register):
    layer = _linear(lib)
    seen = []
    register(layer, seen)
    x = lib.tensor(X.copy(), requires_grad=input_requires_grad)
    (layer(x) ** 2).sum().backward()
    grads = _np([x.grad if input_requires_grad else None, layer.weight.grad, layer.bias.grad])
    return seen, grads


def _both(input_requires_grad, register):
    (mg_seen, mg_grads), (t_seen, t_grads) = (_run(lib, input_requires_grad, register)
                                              for lib in (mg, torch))
    assert [kind for kind, _ in mg_seen] == [kind for kind, _ in t_seen]
    for (_, a), (_, b) in zip(mg_seen, t_seen):
        _same(a, b)
    _same(mg_grads, t_grads)
    return mg_seen


@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_hooks_see_what_torch_shows(input_requires_grad):
    def register(layer, seen):
        layer.register_full_backward_pre_hook(lambda m, go: seen.append(("pre", _np(go))))
        layer.register_full_backward_hook(
            lambda m, gi, go: seen.append(("gi", _np(gi))) or seen.append(("go", _np(go))))

    seen = _both(input_requires_grad, register)
    assert [kind for kind, _ in seen] == ["pre", "gi", "go"]
    assert (seen[1][1][0] is None) == (not input_requires_grad)


def test_full_hook_can_replace_grad_input():
    def register(layer, seen):
        layer.register_full_backward_hook(lambda m, gi, go: tuple(g * 3 for g in gi))

    _both(True, register)


def test_pre_hook_can_replace_grad_output_and_the_next_hook_sees_it():
    def register(layer, seen):
        layer.register_full_backward_pre_hook(lambda m, go: (go[0] * -2,))
        layer.register_full_backward_hook(lambda m, gi, go: seen.append(("go", _np(go))))

    _both(True, register)


def test_prepend_orders_hooks_and_removed_hooks_stay_quiet():
    for lib in (mg, torch):
        layer = _linear(lib)
        order = []
        layer.register_full_backward_hook(lambda m, gi, go: order.append("first"))
        layer.register_full_backward_hook(lambda m, gi, go: order.append("prepended"),
                                          prepend=True)
        handle = layer.register_full_backward_pre_hook(lambda m, go: order.append("removed"))
        handle.remove()
        layer(lib.tensor(X.copy(), requires_grad=True)).sum().backward()
        assert order == ["prepended", "first"], lib


class TwoInputs:
    """A module taking (a, b, scale), where b never requires grad."""

    @staticmethod
    def build(lib):
        class Mixer(lib.nn.Module):
            def forward(self, a, b, scale):
                return (a * b).sum(1) * scale, a.exp()
        return Mixer()


def test_several_inputs_and_outputs_match_torch():
    results = []
    for lib in (mg, torch):
        module = TwoInputs.build(lib)
        seen = []
        module.register_full_backward_hook(
            lambda m, gi, go: seen.append((_np(gi), _np(go))))
        a = lib.tensor(X.copy(), requires_grad=True)
        b = lib.tensor(X[::-1].copy())
        out, expd = module(a, b, 2.0)
        (out.sum() + (expd * 0.5).sum()).backward()
        results.append((seen, a.grad.numpy().copy()))
    (mg_seen, mg_grad), (t_seen, t_grad) = results
    assert len(mg_seen) == len(t_seen) == 1
    _same(mg_seen[0][0], t_seen[0][0])
    assert not mg_seen[0][0][1].any() and mg_seen[0][0][2] is None  # b: zeros; scale: None
    _same(mg_seen[0][1], t_seen[0][1])
    np.testing.assert_allclose(mg_grad, t_grad, rtol=1e-12)


def test_hook_of_a_module_without_grad_inputs_must_not_replace_gradients():
    layer = _linear(mg)
    layer.register_full_backward_hook(lambda m, gi, go: (mg.ones(2, 4),))
    with pytest.raises(RuntimeError, match="must return None"):
        layer(mg.tensor(X.copy())).sum().backward()


def test_wrong_number_of_gradients_is_an_error():
    layer = _linear(mg)
    layer.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="returned 2 values for grad_input, expected 1"):
        layer(mg.tensor(X.copy(), requires_grad=True)).sum().backward()


def test_no_hooks_run_under_no_grad_forward():
    layer = _linear(mg)
    layer.register_full_backward_hook(lambda m, gi, go: pytest.fail("called"))
    with mg.no_grad():
        out = layer(mg.tensor(X.copy(), requires_grad=True))
    assert out.grad_fn is None
