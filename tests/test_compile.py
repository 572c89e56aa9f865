"""torch.compile against torch: a compiled module or function gives the same results as the
uncompiled one, a compiled module is torch's wrapper (`_orig_mod`, its state_dict keys,
attributes reaching the wrapped module), and bad arguments are torch's errors."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def _net(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Tanh(), lib.nn.Dropout(0.5),
                             lib.nn.Linear(8, 2))


def test_compiled_module_is_torchs_wrapper_and_computes_the_same():
    ours, theirs = _net(mg), _net(torch)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    compiled, t_compiled = mg.compile(ours), torch.compile(theirs, backend="eager")
    assert type(compiled).__name__ == type(t_compiled).__name__ == "OptimizedModule"
    assert compiled._orig_mod is ours and isinstance(compiled, mg.nn.Module)
    assert list(compiled.state_dict()) == list(t_compiled.state_dict())
    assert compiled.training and list(compiled.parameters()) == list(ours.parameters())
    compiled.eval()
    assert not ours.training and not compiled.training
    compiled.extra = 3  # attributes set on the wrapper land on the wrapped module, as in torch
    assert ours.extra == 3
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(compiled(mg.tensor(x)).detach().numpy(),
                                  ours(mg.tensor(x)).detach().numpy())
    np.testing.assert_allclose(compiled(mg.tensor(x)).detach().numpy(),
                               t_compiled.eval()(torch.tensor(x)).detach().numpy(),
                               rtol=1.3e-6, atol=1e-5)
    # A state dict saved from the compiled model loads back into a compiled one.
    again = mg.compile(_net(mg))
    again.load_state_dict(compiled.state_dict())
    np.testing.assert_array_equal(again._orig_mod[0].weight.detach().numpy(),
                                  ours[0].weight.detach().numpy())
    loss = compiled(mg.tensor(x)).sum()
    loss.backward()
    assert ours[0].weight.grad is not None


def test_compiled_function_and_decorator_forms():
    def f(x, y):
        return (x * y).sin().sum()

    compiled = mg.compile(f, fullgraph=True, dynamic=False, mode="max-autotune")
    assert compiled.__name__ == "f"
    a, b = mg.tensor([1.0, 2.0]), mg.tensor([3.0, 0.5])
    assert compiled(a, b).item() == f(a, b).item()

    @mg.compile(mode="reduce-overhead")
    def g(x):
        return x * 2
    assert g(mg.tensor([1.5])).item() == 3.0
    model = _net(mg)
    assert mg.compile(model, disable=True) is model
    mg._dynamo.config.suppress_errors = True
    mg._dynamo.reset()


@pytest.mark.parametrize("kwargs", [dict(mode="default", options={}), dict(mode="bogus")])
def test_bad_arguments_are_torchs_errors(kwargs):
    with pytest.raises(RuntimeError) as theirs:
        torch.compile(torch.nn.Linear(2, 2), **kwargs)
    with pytest.raises(RuntimeError) as ours:
        mg.compile(mg.nn.Linear(2, 2), **kwargs)
    assert str(ours.value) == str(theirs.value)
