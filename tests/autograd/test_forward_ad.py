"""Forward-mode AD: every op's tangent rule against finite differences and against
torch.func.jvp (float64, 1e-10), the dual-level API's rules, views and in-place ops as torch
has them, custom Functions' jvp, the jvp/jacfwd helpers and nn layers."""
import types

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.autograd import Function, forward_ad as fwAD, gradcheck
from mpigrad.autograd import functional
from mpigrad.autograd.functional import jvp as functional_jvp
from mpigrad.autograd.gradcheck import GradcheckError
from mpigrad.autograd.graph import reachable
from mpigrad.ops.core import REGISTRY, OpNode

from tests.ops.test_gradcheck_ops import CASES, _normal

torch = pytest.importorskip("torch")

IDS = [c[0] for c in CASES]


def _arrays(specs, rng):
    return [sampler(shape, rng) for shape, sampler in specs]


def _numpy(t):
    return t.detach().numpy()


def _mg_jvp(fn, primals, tangents):
    out, jv = mg.func.jvp(fn, tuple(mg.tensor(p) for p in primals),
                          tuple(mg.tensor(t) for t in tangents))
    return out.numpy(), jv.numpy()


# CASES are written against mpigrad's torch-like API; the same code runs on torch with these
# names swapped in.
_TORCH_F = types.SimpleNamespace(linear=torch.nn.functional.linear,
                                 gelu=torch.nn.functional.gelu, pad=torch.nn.functional.pad,
                                 cast=lambda a, dtype: a.to(dtype))


def _on_torch(fn):
    names = dict(fn.__globals__, mg=torch, F=_TORCH_F)
    return types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)


def test_every_op_with_a_gradient_has_a_tangent_rule():
    missing = sorted(name for name, op in REGISTRY.items()
                     if op.vjps is not None and op.jvps is None)
    assert not missing, f"ops with a gradient rule but no tangent rule (jvps): {missing}"


def _gradient_function(fn, n):
    """(inputs..., seed) -> the gradient of fn along seed. Forward AD through it runs the
    tangent rules of the ops the gradient rules use (index_scatter, conv_transpose2d, ...)."""
    def gradient(*args):
        grads = mg.autograd.grad(fn(*args[:n]), args[:n], args[n], create_graph=True,
                                 allow_unused=True)
        return tuple(g for g in grads if g is not None)
    return gradient


def _with_seed(fn, specs, rng):
    inputs = [mg.tensor(a, requires_grad=True) for a in _arrays(specs, rng)]
    seed = mg.tensor(rng.standard_normal(fn(*inputs).shape), requires_grad=True)
    return inputs + [seed]


def _rules_run(fn, specs, rng, monkeypatch):
    """Names of the ops whose tangent rule runs in forward AD through fn and its gradient."""
    ran = set()
    output_tangent = mg.ops.core._output_tangent

    def recording(op, *args):
        ran.add(op.name)
        return output_tangent(op, *args)
    monkeypatch.setattr(mg.ops.core, "_output_tangent", recording)
    args = _with_seed(fn, specs, rng)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(x, mg.ones_like(x)) for x in args]
        _gradient_function(fn, len(specs))(*duals)
        assert fwAD.unpack_dual(fn(*duals[:-1])).tangent is not None
    monkeypatch.undo()
    return ran


def test_every_tangent_rule_is_run_by_a_case(float64, rng, monkeypatch):
    ran = set().union(*(_rules_run(fn, specs, rng, monkeypatch) for _, fn, specs in CASES))
    untested = sorted(name for name, op in REGISTRY.items() if op.jvps is not None
                      and name not in ran)
    assert not untested, f"tangent rules that no case in CASES runs: {untested}"


@pytest.mark.parametrize("name,fn,specs", CASES, ids=IDS)
def test_gradcheck_forward_ad(name, fn, specs, float64, rng):
    inputs = tuple(mg.tensor(a, requires_grad=True) for a in _arrays(specs, rng))
    assert gradcheck(fn, inputs, check_forward_ad=True, check_backward_ad=False)


@pytest.mark.parametrize("name,fn,specs", CASES, ids=IDS)
def test_gradcheck_forward_over_reverse(name, fn, specs, float64, rng):
    """Tangents of every gradient against finite differences: the tangent rules of the ops
    that gradient rules use, and backward through dual tensors."""
    assert gradcheck(_gradient_function(fn, len(specs)), tuple(_with_seed(fn, specs, rng)),
                     check_forward_ad=True, check_backward_ad=False)


# Cases that use an mpigrad argument torch's function lacks (their tangents are still checked
# against finite differences above).
_NOT_IN_TORCH = {"prod_all_keepdim": "torch.prod takes keepdim only together with dim",
                 "dropout": "torch draws its own mask (tests/kernels/test_dropout.py compares "
                            "with the mask applied)",
                 **dict.fromkeys(["lstm_packed_projected", "lstm_packed_reverse", "gru_packed",
                                  "lstm_layer_padded", "lstm_layer_packed_reverse",
                                  "rnn_packed"], "one layer's recurrence has no torch function "
                                 "(tests/nn/test_rnn_vs_torch.py compares the modules)")}


@pytest.mark.parametrize("name,fn,specs", CASES, ids=IDS)
def test_tangent_equals_torch_func_jvp(name, fn, specs, float64, rng):
    if name in _NOT_IN_TORCH:
        pytest.skip(_NOT_IN_TORCH[name])
    primals = _arrays(specs, rng)
    tangents = [rng.standard_normal(p.shape) for p in primals]
    out, jv = _mg_jvp(fn, primals, tangents)
    expected_out, expected_jv = _torch_jvp(_on_torch(fn), [torch.tensor(p) for p in primals],
                                           [torch.tensor(t) for t in tangents])
    np.testing.assert_allclose(out, expected_out.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(jv, expected_jv.numpy(), rtol=1e-10, atol=1e-10)


def _torch_jvp(fn, primals, tangents):
    """torch.func.jvp; for a case that takes gradients itself, which torch.func cannot run
    (autograd.grad inside it), torch's dual tensors on inputs that require grad."""
    if "autograd" not in fn.__code__.co_names:
        return torch.func.jvp(fn, tuple(primals), tuple(tangents))
    fw = torch.autograd.forward_ad
    with fw.dual_level():
        out = fn(*[fw.make_dual(p.requires_grad_(), t) for p, t in zip(primals, tangents)])
        return fw.unpack_dual(out).primal.detach(), fw.unpack_dual(out).tangent.detach()


def test_gradcheck_forward_ad_catches_a_wrong_tangent_rule(float64, rng):
    class WrongJvp(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_forward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("not used")

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return t * x  # should be 2 * t * x

    x = mg.tensor(rng.standard_normal(4), requires_grad=True)
    with pytest.raises(GradcheckError, match="forward mode AD"):
        gradcheck(WrongJvp.apply, (x,), check_forward_ad=True, check_backward_ad=False)


# ----------------------------------------------------------------------------- the API rules
@pytest.mark.parametrize("lib,fw", [(mg, fwAD), (torch, torch.autograd.forward_ad)],
                         ids=["mpigrad", "torch"])
def test_level_rules_match_torch(lib, fw):
    x, t = lib.ones(3, dtype=lib.float64), lib.zeros(3, dtype=lib.float64)
    with pytest.raises(RuntimeError, match="no level exists"):
        fw.make_dual(x, t)
    primal, tangent = fw.unpack_dual(x)
    assert primal is x and tangent is None
    with fw.dual_level():
        with pytest.raises(RuntimeError, match="Nested forward mode AD is not supported"):
            fw.enter_dual_level()
        dual = fw.make_dual(x, t)
        with pytest.raises(RuntimeError, match="already has a forward gradient"):
            fw.make_dual(dual, t)
        with pytest.raises(ValueError, match="floating point"):
            fw.make_dual(lib.ones(3, dtype=lib.int64), t)
        assert fw.unpack_dual(x).tangent is None
        assert fw.unpack_dual(dual).tangent is t
        assert fw.unpack_dual(fw.unpack_dual(dual).primal).tangent is None
        assert fw.unpack_dual(dual.detach()).tangent is None
    # Leaving the level drops its tangents; a new level starts with none.
    assert fw.unpack_dual(dual).tangent is None
    with fw.dual_level():
        assert fw.unpack_dual(dual).tangent is None
    with pytest.raises(RuntimeError):
        fw.exit_dual_level()


def test_exiting_a_level_that_is_not_active_says_so():
    with pytest.raises(RuntimeError, match="no dual level is active"):
        fwAD.exit_dual_level()
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="not the last one"):
            fwAD.exit_dual_level(level=3)


def test_dual_level_as_a_decorator(float64):
    @fwAD.dual_level()
    def directional_derivative(x, v):
        return fwAD.unpack_dual((fwAD.make_dual(x, v) ** 2).sum()).tangent

    assert directional_derivative(mg.tensor([1.0, 2.0]), mg.tensor([1.0, -1.0])).item() == -2.0
    assert fwAD._global.level is None


def test_make_dual_checks_the_tangent(float64):
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match=r"tangent has shape \(2,\).*\(3,\)"):
            fwAD.make_dual(mg.ones(3), mg.ones(2))
        with pytest.raises(RuntimeError, match="float32.*float64"):
            fwAD.make_dual(mg.ones(3), mg.ones(3, dtype=mg.float32))


def test_dual_tensor_dies_with_its_tangent_entry(float64):
    with fwAD.dual_level() as level:
        assert level == 0
        entries = fwAD._global.level.tangents
        dual = fwAD.make_dual(mg.ones(3), mg.ones(3))
        (dual * 2).exp()
        assert len(entries) == 1  # the temporaries' tangents went with them
        del dual
        assert not entries


def test_no_level_no_tangents_and_integer_results_have_none(float64):
    with fwAD.dual_level():
        x = fwAD.make_dual(mg.tensor([1.5, -2.0]), mg.tensor([1.0, 1.0]))
        assert fwAD.unpack_dual(x.argmax()).tangent is None
        assert fwAD.unpack_dual(x > 0).tangent is None
        assert fwAD.unpack_dual(x.long()).tangent is None
        np.testing.assert_array_equal(fwAD.unpack_dual(x.float()).tangent.numpy(), [1, 1])


# ----------------------------------------------------------------------------- views, in place
def _inplace_on_dual(lib, fw, p, t):
    y = fw.make_dual(p.clone(), t.clone())
    y.mul_(y + 1.0)
    y.exp_()
    return [y]


def _inplace_on_a_view_of_a_dual(lib, fw, p, t):
    y = fw.make_dual(p.clone(), t.clone())
    y[1:].mul_(2.5)
    y.view(-1)[0:2].tanh_()
    return [y]


def _view_sees_inplace_on_its_base(lib, fw, p, t):
    y = fw.make_dual(p.clone(), t.clone())
    row, column = y[0], y[:, 1]
    y.mul_(3.0)
    y.tanh_()
    return [row, column]


def _setitem_into_a_plain_tensor(lib, fw, p, t):
    buf = lib.zeros(4, 3, dtype=lib.float64)
    y = fw.make_dual(p.clone(), t.clone())
    buf[1:3, [0, 2]] = y[0:2, 0:2] * 2
    return [buf]


def _copy_into_a_view_of_a_plain_tensor(lib, fw, p, t):
    buf = lib.ones(3, 4, 3, dtype=lib.float64)
    y = fw.make_dual(p.clone(), t.clone())
    buf[1].copy_(y.exp())
    return [buf, buf[1, 2]]


def _plain_tensor_updated_by_a_dual(lib, fw, p, t):
    z = p.clone()
    y = fw.make_dual(p.clone(), t.clone())
    z.add_(y * y)
    z.masked_fill_(z > 1.0, 0.5)
    return [z]


@pytest.mark.parametrize("scenario", [_inplace_on_dual, _inplace_on_a_view_of_a_dual,
                                      _view_sees_inplace_on_its_base,
                                      _setitem_into_a_plain_tensor,
                                      _copy_into_a_view_of_a_plain_tensor,
                                      _plain_tensor_updated_by_a_dual])
def test_views_and_inplace_carry_tangents_as_torch(scenario, float64, rng):
    p, t = rng.standard_normal((4, 3)) * 0.5, rng.standard_normal((4, 3))
    results = {}
    for lib, fw in ((mg, fwAD), (torch, torch.autograd.forward_ad)):
        with fw.dual_level():
            outs = scenario(lib, fw, lib.tensor(p), lib.tensor(t))
            results[lib] = [(_numpy(fw.unpack_dual(o).primal), _numpy(fw.unpack_dual(o).tangent))
                            for o in outs]
    for (mine, mine_t), (theirs, theirs_t) in zip(results[mg], results[torch]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
        np.testing.assert_allclose(mine_t, theirs_t, rtol=1e-12)


def test_a_view_tangent_is_a_view_of_the_tangent(float64):
    with fwAD.dual_level():
        tangent = mg.zeros(2, 3)
        y = fwAD.make_dual(mg.ones(2, 3), tangent)
        view_tangent = fwAD.unpack_dual(y.T[1]).tangent
        assert np.shares_memory(view_tangent.numpy(), tangent.numpy())
        out_tangent = fwAD.unpack_dual(y.clone()).tangent
        assert not np.shares_memory(out_tangent.numpy(), tangent.numpy())


# ----------------------------------------------------------------------------- both modes
def test_reverse_over_forward_matches_torch(float64, rng):
    """The tangent is an ordinary tensor: its gradient (here H v of sum(tanh(x)^3 * w)) is
    exact, because tangent rules are Tensor operations recorded like any other."""
    xv, vv, wv = (rng.standard_normal(5) for _ in range(3))
    grads = []
    for lib, fw in ((mg, fwAD), (torch, torch.autograd.forward_ad)):
        x = lib.tensor(xv, requires_grad=True)
        with fw.dual_level():
            y = (fw.make_dual(x, lib.tensor(vv)).tanh() ** 3 * lib.tensor(wv)).sum()
            fw.unpack_dual(y).tangent.backward()
        grads.append(_numpy(x.grad))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


def _scalar_function(lib, w):
    def f(x):
        return ((w @ x).softmax(0) * x.exp()).sum() + (x.tanh() ** 3).sum() + x.norm()
    return f


@pytest.mark.parametrize("create_graph", [False, True])
def test_forward_over_reverse_gives_hessian_vector_products_as_torch(create_graph, float64,
                                                                     rng):
    """Backward through dual tensors gives dual gradients: the gradient's tangent is H v."""
    xv, vv, wv = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((4, 4))
    results = []
    for lib, fw in ((mg, fwAD), (torch, torch.autograd.forward_ad)):
        f = _scalar_function(lib, lib.tensor(wv))
        x = lib.tensor(xv, requires_grad=True)
        with fw.dual_level():
            y = f(fw.make_dual(x, lib.tensor(vv)))
            (g,) = lib.autograd.grad(y, x, create_graph=create_graph)
            results.append([_numpy(fw.unpack_dual(g).primal), _numpy(fw.unpack_dual(g).tangent)])
    for mine, theirs in zip(*results):
        np.testing.assert_allclose(mine, theirs, rtol=1e-10)


def test_jvp_of_a_function_that_takes_gradients(float64, rng):
    """functional.jvp of x -> grad f(x) is H v, as the double-vjp trick used to give it."""
    xv, vv, wv = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((4, 4))
    jvs = []
    for lib, jvp_fn in ((mg, functional_jvp), (torch, torch.autograd.functional.jvp)):
        f = _scalar_function(lib, lib.tensor(wv))

        def gradient(x):
            return lib.autograd.grad(f(x), x, create_graph=True)[0]
        jvs.append(_numpy(jvp_fn(gradient, lib.tensor(xv), lib.tensor(vv))[1]))
    np.testing.assert_allclose(jvs[0], jvs[1], rtol=1e-10)
    hv = functional.hvp(_scalar_function(mg, mg.tensor(wv)), mg.tensor(xv), mg.tensor(vv))[1]
    np.testing.assert_allclose(jvs[0], hv.numpy(), rtol=1e-10)


# ----------------------------------------------------------------------------- Function.jvp
class _Cube(Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.scale = scale
        return scale * x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * ctx.scale * x ** 2, None

    @staticmethod
    def jvp(ctx, t, scale_tangent):
        assert scale_tangent is None
        (x,) = ctx.saved_tensors
        return t * 3 * ctx.scale * x ** 2


class _NoJvp(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_custom_function_jvp(float64, rng):
    x = mg.tensor(rng.standard_normal(4), requires_grad=True)
    assert gradcheck(lambda a: _Cube.apply(a, 1.5), (x,), check_forward_ad=True)
    with fwAD.dual_level():
        out = _Cube.apply(fwAD.make_dual(x, mg.ones(4)), 1.5) + x
        np.testing.assert_allclose(fwAD.unpack_dual(out).tangent.detach().numpy(),
                                   4.5 * x.detach().numpy() ** 2, rtol=1e-12)


def test_custom_function_without_jvp_under_forward_ad_says_so(float64):
    x = mg.ones(3)
    assert _NoJvp.apply(x).shape == (3,)  # fine without duals
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="_NoJvp .*implement the jvp function"):
            _NoJvp.apply(fwAD.make_dual(x, mg.ones(3)))
        assert _NoJvp.apply(x).shape == (3,)  # plain inputs need no jvp


def test_custom_function_jvp_with_a_tangent_of_the_wrong_shape(float64):
    class Bad(_Cube):
        @staticmethod
        def jvp(ctx, t, scale_tangent):
            return t.sum()

    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match=r"tangent of output 0 .* shape \(3,\)"):
            Bad.apply(fwAD.make_dual(mg.ones(3), mg.ones(3)), 2.0)


# ----------------------------------------------------------------------------- jvp, jacfwd
def test_functional_jvp_needs_no_backward(float64, rng):
    """A function whose ops have tangent rules but no usable backward: the double-vjp trick
    could not differentiate it, one forward pass does."""
    xv, vv = rng.standard_normal(4), rng.standard_normal(4)
    out, jv = functional_jvp(lambda a: _Cube.apply(a, 2.0).sin(), mg.tensor(xv), mg.tensor(vv))
    expected_out, expected_jv = torch.autograd.functional.jvp(
        lambda a: (2.0 * a ** 3).sin(), torch.tensor(xv), torch.tensor(vv))
    np.testing.assert_allclose(out.numpy(), expected_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(jv.numpy(), expected_jv.numpy(), rtol=1e-12)
    assert not jv.requires_grad


def test_functional_jvp_create_graph_and_tuples_match_torch(float64, rng):
    xv, yv, vx, vy = (rng.standard_normal((3, 2)) for _ in range(4))

    def results(lib, jvp_fn):
        def f(a, b):
            return (a * b).tanh(), (a @ b.T).sum()
        v = (lib.tensor(vx, requires_grad=True), lib.tensor(vy))
        outs, jvs = jvp_fn(f, (lib.tensor(xv), lib.tensor(yv)), v, create_graph=True)
        assert isinstance(outs, tuple) and len(jvs) == 2
        (jvs[0].sum() + jvs[1]).backward()
        return [_numpy(o) for o in outs + jvs] + [_numpy(v[0].grad)]

    mine = results(mg, functional_jvp)
    theirs = results(torch, torch.autograd.functional.jvp)
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_functional_jvp_refuses_to_nest(float64):
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="outside the"):
            functional_jvp(lambda a: a * 2, mg.ones(2), mg.ones(2))


def test_func_jvp_and_jacfwd_match_torch_func(float64, rng):
    xv, wv, tx, tw = rng.standard_normal(3), rng.standard_normal((2, 3)), \
        rng.standard_normal(3), rng.standard_normal((2, 3))

    def f(x, w):
        y = (w @ x).tanh()
        return y, {"norm": y.norm()}

    for lib, func in ((mg, mg.func), (torch, torch.func)):
        x, w = lib.tensor(xv), lib.tensor(wv)
        out, jv, aux = func.jvp(f, (x, w), (lib.tensor(tx), lib.tensor(tw)), has_aux=True)
        (jx, jw), aux2 = func.jacfwd(f, argnums=(0, 1), has_aux=True)(x, w)
        jx_only = func.jacfwd(lambda a: f(a, w)[0])(x)
        if lib is mg:
            mine = [out, jv, aux["norm"], jx, jw, aux2["norm"], jx_only]
        else:
            theirs = [out, jv, aux["norm"], jx, jw, aux2["norm"], jx_only]
    for a, b in zip(mine, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(RuntimeError, match="primals to be a tuple"):
        mg.func.jvp(f, mg.tensor(xv), (mg.tensor(tx),))


# ----------------------------------------------------------------------------- nn layers
def _copy_parameters(module, torch_module):
    with mg.no_grad():
        for mine, theirs in zip(module.parameters(), torch_module.parameters()):
            mine.copy_(theirs.detach().numpy())


def _layers():
    mlp = lambda nn: nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                                   nn.Linear(16, 3))  # noqa: E731
    return [
        ("linear", lambda nn: nn.Linear(6, 4), (5, 6)),
        ("conv2d", lambda nn: nn.Conv2d(2, 3, 3, stride=2, padding=1), (2, 2, 7, 6)),
        ("layer_norm", lambda nn: nn.LayerNorm((3, 6)), (4, 3, 6)),
        ("mlp", mlp, (8, 6)),
    ]


def _make_parameters_dual(module, tangents):
    """torch's recipe for forward AD through a module: swap each parameter for a dual."""
    for (name, p), t in zip(list(module.named_parameters()), tangents):
        *path, leaf = name.split(".")
        owner = module
        for step in path:
            owner = getattr(owner, step)
        delattr(owner, leaf)
        setattr(owner, leaf, fwAD.make_dual(p, mg.tensor(t)))


@pytest.mark.parametrize("name,build,shape", _layers(), ids=[layer[0] for layer in _layers()])
def test_nn_layers_forward_ad_match_torch(name, build, shape, float64, rng):
    torch.manual_seed(0)
    theirs = build(torch.nn).double()
    mine = build(mg.nn)
    _copy_parameters(mine, theirs)
    xv, tv = rng.standard_normal(shape), rng.standard_normal(shape)
    names = [n for n, _ in theirs.named_parameters()]
    param_tangents = [rng.standard_normal(p.shape) for p in theirs.parameters()]

    # The input and every parameter carry a tangent.
    with fwAD.dual_level():
        _make_parameters_dual(mine, param_tangents)
        out = mine(fwAD.make_dual(mg.tensor(xv), mg.tensor(tv)))
        mine_out, mine_t = fwAD.unpack_dual(out)
    expected_out, expected_t = torch.func.jvp(
        lambda x, *ps: torch.func.functional_call(theirs, dict(zip(names, ps)), (x,)),
        (torch.tensor(xv),) + tuple(p.detach() for p in theirs.parameters()),
        (torch.tensor(tv),) + tuple(torch.tensor(pt) for pt in param_tangents))
    np.testing.assert_allclose(mine_out.detach().numpy(), expected_out.detach().numpy(),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mine_t.detach().numpy(), expected_t.detach().numpy(),
                               rtol=1e-10, atol=1e-12)


def test_loss_of_an_mlp_forward_ad_matches_torch(float64, rng):
    """The directional derivative of a training loss (cross-entropy with label smoothing)
    along a direction in input space."""
    xv, tv = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))
    target = rng.integers(0, 3, 6)
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.GELU(),
                                 torch.nn.Linear(8, 3)).double()
    mine = mg.nn.Sequential(mg.nn.Linear(5, 8), mg.nn.GELU(), mg.nn.Linear(8, 3))
    _copy_parameters(mine, theirs)
    results = []
    for lib, model, func in ((mg, mine, mg.func), (torch, theirs, torch.func)):
        y = lib.tensor(target)
        loss, slope = func.jvp(
            lambda x: lib.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1),
            (lib.tensor(xv),), (lib.tensor(tv),))
        results.append((loss.item(), slope.item()))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10)


def test_functional_jacobian_forward_mode_matches_torch_and_reverse_mode(float64, rng):
    xv, yv = rng.standard_normal((2, 3)), rng.standard_normal(3)

    def f(a, b):
        return (a * b).sin(), (a @ b).exp()

    mine = functional.jacobian(f, (mg.tensor(xv), mg.tensor(yv)), strategy="forward-mode")
    reverse = functional.jacobian(f, (mg.tensor(xv), mg.tensor(yv)))
    theirs = torch.autograd.functional.jacobian(f, (torch.tensor(xv), torch.tensor(yv)),
                                                vectorize=True, strategy="forward-mode")
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(mine[i][j].numpy(), theirs[i][j].numpy(), rtol=1e-12)
            np.testing.assert_allclose(mine[i][j].numpy(), reverse[i][j].numpy(), rtol=1e-12)
    single = functional.jacobian(lambda a: a.tanh(), mg.tensor(yv), strategy="forward-mode")
    np.testing.assert_allclose(single.numpy(), np.diag(1 - np.tanh(yv) ** 2), rtol=1e-12)
    with pytest.raises(ValueError, match="strategy"):
        functional.jacobian(f, (mg.tensor(xv), mg.tensor(yv)), strategy="sideways")


def test_forward_ad_through_a_module_with_full_backward_hooks(float64, rng):
    layer = mg.nn.Linear(3, 2)
    seen = []
    layer.register_full_backward_hook(lambda module, grad_in, grad_out: seen.append(grad_out))
    xv, tv = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    _, jv = mg.func.jvp(layer, (mg.tensor(xv),), (mg.tensor(tv),))
    np.testing.assert_allclose(jv.numpy(), tv @ layer.weight.detach().numpy().T, rtol=1e-12)
    layer(mg.tensor(xv, requires_grad=True)).sum().backward()
    assert len(seen) == 1
