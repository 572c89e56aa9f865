"""The Optimizer base: parameter groups, skipping, zero_grad, closures and state dicts."""

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import Tensor, optim


def leaf(values):
    return Tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


def with_grad(param, values):
    param.grad = Tensor(np.asarray(values, dtype=param.dtype))
    return param


def test_params_become_one_group_with_the_defaults():
    a, b = leaf([1.0]), leaf([2.0])
    optimizer = optim.SGD([a, b], lr=0.5, momentum=0.1)
    (group,) = optimizer.param_groups
    assert group["params"] == [a, b]
    assert group["lr"] == 0.5 and group["momentum"] == 0.1 and group["nesterov"] is False


def test_group_hyperparameters_override_defaults_and_missing_ones_are_filled():
    a, b = leaf([1.0]), leaf([2.0])
    optimizer = optim.SGD([{"params": [a]}, {"params": b, "lr": 0.01}], lr=0.1)
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 0.01]
    assert optimizer.param_groups[1]["params"] == [b]
    assert optimizer.param_groups[1]["momentum"] == 0


def test_add_param_group_adds_a_group_that_steps():
    a, b = leaf([1.0]), leaf([2.0])
    optimizer = optim.SGD([a], lr=0.1)
    optimizer.add_param_group({"params": [b], "lr": 1.0})
    with_grad(a, [1.0]), with_grad(b, [1.0])
    optimizer.step()
    assert a.detach().numpy()[0] == pytest.approx(0.9) and b.detach().numpy()[0] == pytest.approx(1.0)


@pytest.mark.parametrize("params, error, message", [
    (leaf([1.0]), TypeError, "iterable of Tensors or dicts"),
    ([], ValueError, "empty parameter list"),
    ([np.zeros(2)], TypeError, "can only optimize Tensors"),
    ([{"params": {leaf([1.0])}}], TypeError, "ordered collections"),
    ([{"lr": 0.1}], ValueError, "under the key 'params'"),
])
def test_bad_params_are_refused(params, error, message):
    with pytest.raises(error, match=message):
        optim.SGD(params)


def test_a_parameter_given_twice_is_refused():
    a = leaf([1.0])
    with pytest.raises(ValueError, match="appears twice"):
        optim.SGD([a, a])
    optimizer = optim.SGD([a])
    with pytest.raises(ValueError, match="appears twice"):
        optimizer.add_param_group({"params": [a]})


def test_a_non_leaf_tensor_is_refused():
    a = leaf([1.0])
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([a * 2])


@pytest.mark.parametrize("make, message", [
    (lambda p: optim.SGD(p, lr=-1), "Invalid learning rate: -1"),
    (lambda p: optim.SGD(p, momentum=-0.5), "Invalid momentum value: -0.5"),
    (lambda p: optim.SGD(p, weight_decay=-1e-4), "Invalid weight_decay value: -0.0001"),
    (lambda p: optim.SGD(p, nesterov=True), "Nesterov momentum requires a momentum"),
    (lambda p: optim.SGD(p, momentum=0.9, dampening=0.1, nesterov=True),
     "zero dampening"),
    (lambda p: optim.SGD([{"params": p, "lr": -2}]), "Invalid learning rate: -2"),
    (lambda p: optim.Adam(p, lr=-1), "Invalid learning rate: -1"),
    (lambda p: optim.Adam(p, eps=-1e-8), "Invalid epsilon value"),
    (lambda p: optim.Adam(p, betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
    (lambda p: optim.Adam(p, betas=(0.9, -0.1)), "Invalid beta parameter at index 1"),
    (lambda p: optim.Adam(p, betas=(0.9,)), "betas must be a pair"),
    (lambda p: optim.AdamW(p, weight_decay=-1), "Invalid weight_decay value: -1"),
])
def test_invalid_hyperparameters_raise_like_torch(make, message):
    with pytest.raises(ValueError, match=message):
        make([leaf([1.0])])


def test_parameters_without_grad_are_skipped():
    a, b = leaf([1.0]), leaf([2.0])
    optimizer = optim.Adam([a, b], lr=0.1)
    with_grad(a, [1.0])
    optimizer.step()
    assert b.data[0] == 2.0 and b not in optimizer.state
    assert a.data[0] != 1.0 and optimizer.state[a]["step"] == 1


def test_step_updates_storage_in_place_and_bumps_the_version():
    a = with_grad(leaf([1.0, 2.0]), [1.0, 1.0])
    storage, version = a._array, a._version
    optim.SGD([a], lr=0.5, momentum=0.9).step()
    assert a._array is storage
    np.testing.assert_array_equal(storage, [0.5, 1.5])
    assert a._version > version


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    a = with_grad(leaf([1.0, 2.0]), [3.0, 4.0])
    grad_storage = a.grad._array
    optim.SGD([a]).zero_grad(set_to_none=set_to_none)
    if set_to_none:
        assert a.grad is None
    else:
        assert a.grad._array is grad_storage
        np.testing.assert_array_equal(a.grad.data, [0.0, 0.0])


def test_step_calls_the_closure_with_grad_enabled_and_returns_its_loss():
    from mpigrad.autograd.grad_mode import is_grad_enabled, no_grad

    a = leaf([3.0])
    seen = []

    def closure():
        seen.append(is_grad_enabled())
        with_grad(a, [2 * a.data[0]])
        return a.data[0] ** 2

    optimizer = optim.SGD([a], lr=0.25)
    with no_grad():
        loss = optimizer.step(closure)
    assert loss == 9.0 and seen == [True]
    assert a.data[0] == 1.5


def test_state_dict_has_torchs_layout():
    a, b, c = leaf([1.0]), leaf([2.0, 3.0]), leaf([4.0])
    optimizer = optim.SGD([{"params": [a, b]}, {"params": [c], "lr": 0.5}],
                          lr=0.1, momentum=0.9)
    with_grad(a, [1.0]), with_grad(c, [1.0])
    optimizer.step()
    state = optimizer.state_dict()
    assert set(state) == {"state", "param_groups"}
    assert [g["params"] for g in state["param_groups"]] == [[0, 1], [2]]
    assert state["param_groups"][1] == {"lr": 0.5, "momentum": 0.9, "dampening": 0,
                                        "weight_decay": 0, "nesterov": False,
                                        "maximize": False, "foreach": None,
                                        "differentiable": False, "fused": None, "params": [2]}
    assert set(state["state"]) == {0, 2}
    np.testing.assert_array_equal(state["state"][2]["momentum_buffer"].data, [1.0])


def _run(optimizer, params, grads):
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            with_grad(param, grad)
        optimizer.step()


@pytest.mark.parametrize("make", [
    lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=1e-2),
    lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, maximize=True),
    lambda p: optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=1e-2),
    lambda p: optim.AdamW(p, lr=0.01),
], ids=["sgd-dampening", "sgd-nesterov", "adam-amsgrad", "adamw"])
def test_state_dict_round_trip_continues_bit_identically(make):
    rng = np.random.default_rng(0)
    initial = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    grads = [[rng.standard_normal(p.shape) for p in initial] for _ in range(10)]

    straight = [leaf(p.copy()) for p in initial]
    _run(make(straight), straight, grads)

    first = [leaf(p.copy()) for p in initial]
    optimizer = make(first)
    _run(optimizer, first, grads[:5])
    state = optimizer.state_dict()
    resumed = [leaf(p.detach().numpy().copy()) for p in first]
    fresh = make(resumed)
    fresh.load_state_dict(state)
    _run(optimizer, first, grads[5:])  # the old optimizer keeps going on its own state
    _run(fresh, resumed, grads[5:])

    for s, r, f in zip(straight, resumed, first):
        np.testing.assert_array_equal(s.data, r.data)
        np.testing.assert_array_equal(s.data, f.data)


def test_load_state_dict_restores_hyperparameters_and_casts_buffers_to_the_param_dtype():
    a = with_grad(leaf([1.0, 2.0]), [1.0, 1.0])
    saved = optim.SGD([a], lr=0.5, momentum=0.9)
    saved.step()
    state = saved.state_dict()

    b = Tensor(np.zeros(2, dtype=np.float32), requires_grad=True)
    fresh = optim.SGD([b], lr=0.1, momentum=0.5)
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == 0.5 and fresh.param_groups[0]["momentum"] == 0.9
    assert fresh.param_groups[0]["params"] == [b]
    buffer = fresh.state[b]["momentum_buffer"]
    assert buffer.dtype == np.float32
    assert buffer._array is not state["state"][0]["momentum_buffer"]._array


def _sgd_state(*shapes):
    params = [with_grad(leaf(np.ones(shape)), np.ones(shape)) for shape in shapes]
    optimizer = optim.SGD(params, momentum=0.9)
    optimizer.step()
    return optimizer.state_dict()


# Each state is made when its test runs (a lambda): stepping an optimizer at collection would
# compile its loop in every pytest process.
_UNFITTING_STATES = [
    (lambda: {"state": {}}, "keys 'state' and 'param_groups'"),
    (lambda: _sgd_state((2,), (3,), (1,)), "has 3 parameters, but the optimizer's group 0 has 2"),
    (lambda: _sgd_state((2,), (4,)), r"'momentum_buffer' of parameter 1 has shape \(4,\), but "
                                     r"the parameter has shape \(3,\)"),
    (lambda: {"state": {}, "param_groups": [{"params": [0, 1], "lr": 0.1}]},
     "lacks .*'momentum'"),
    (lambda: {"state": {5: {}}, "param_groups": _sgd_state((2,), (3,))["param_groups"]},
     "refers to parameter 5"),
]


@pytest.mark.parametrize("state, message", _UNFITTING_STATES, ids=[
    f"state{i}-{message}" for i, (_, message) in enumerate(_UNFITTING_STATES)])
def test_load_state_dict_rejects_a_state_that_does_not_fit(state, message):
    optimizer = optim.SGD([leaf(np.ones(2)), leaf(np.ones(3))], momentum=0.9)
    with pytest.raises(ValueError, match=message):
        optimizer.load_state_dict(state())


def test_load_state_dict_rejects_a_different_number_of_groups():
    a, b = leaf([1.0]), leaf([2.0])
    state = optim.SGD([{"params": [a]}, {"params": [b]}]).state_dict()
    with pytest.raises(ValueError, match="has 2 parameter groups, but the optimizer has 1"):
        optim.SGD([leaf([1.0]), leaf([2.0])]).load_state_dict(state)


def test_repr_lists_groups_and_hyperparameters():
    text = repr(optim.AdamW([leaf([1.0])], lr=0.5))
    assert text.startswith("AdamW (\nParameter Group 0\n")
    assert "    lr: 0.5\n" in text and "    weight_decay: 0.01\n" in text


def test_a_subclass_step_decorated_with_no_grad_runs_without_grad():
    """pytorch/examples' own optimizers decorate step with @torch.no_grad() and update
    parameters in place; the profiler's wrapping of step used to unwrap that decorator."""
    class PlainSGD(optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, {"lr": lr})

        @mg.no_grad()
        def step(self, closure=None):
            assert not mg.is_grad_enabled()
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-group["lr"])

    class PlainerSGD(PlainSGD):
        pass

    for kind in (PlainSGD, PlainerSGD):
        w = Tensor(np.ones(3), requires_grad=True)
        (w * w).sum().backward()
        kind([w], lr=0.25).step()
        np.testing.assert_array_equal(w.data, np.full(3, 0.5))
        assert mg.is_grad_enabled()


def test_a_state_dict_saved_without_torchs_kernel_flags_still_loads():
    """Groups saved before SGD and Adam kept foreach/fused/differentiable take the new
    optimizer's flags."""
    a = leaf([1.0, 2.0])
    optimizer = optim.Adam([a], lr=0.1, fused=True)
    with_grad(a, [1.0, 1.0])
    optimizer.step()
    saved = optimizer.state_dict()
    for key in ("foreach", "fused", "capturable", "differentiable"):
        del saved["param_groups"][0][key]
    resumed = optim.Adam([leaf([1.0, 2.0])], lr=0.1, fused=True)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["fused"] is True and resumed.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=1e-3)),
    ("AdamW", dict(lr=3e-3, betas=(0.9, 0.95))), ("Adadelta", dict(lr=1.0)),
])
def test_an_optimizer_prints_and_lists_its_groups_as_torch(name, kwargs):
    """Found by tests/programs/gpt.py printing its AdamW: torch's groups carry foreach, fused,
    capturable and differentiable, and a blank line parts the groups."""
    torch = pytest.importorskip("torch")

    def groups(lib):
        weight, bias = (lib.nn.Parameter(lib.zeros(2, 2)), lib.nn.Parameter(lib.zeros(2)))
        return [{"params": [weight], "weight_decay": 0.1}, {"params": [bias]}]
    ours = getattr(optim, name)(groups(mg), **kwargs)
    theirs = getattr(torch.optim, name)(groups(torch), **kwargs)
    assert repr(ours) == repr(theirs)
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]
