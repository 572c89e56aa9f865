"""Factories (device=, dtype aliases, legacy typed constructors, *_like, randint's forms) and
the tensor methods PyTorch scripts use (type, narrow, random_, %, format), against torch."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def _raises_alike(ours, theirs):
    """Both raise, with the same exception type."""
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(expected.type):
        ours()


FACTORIES = [
    ("zeros", lambda m, **kw: m.zeros(2, 3, **kw)),
    ("ones", lambda m, **kw: m.ones((2,), **kw)),
    ("empty", lambda m, **kw: m.empty(2, **kw)),
    ("full", lambda m, **kw: m.full((2,), 1.5, **kw)),
    ("tensor", lambda m, **kw: m.tensor([1, 2], **kw)),
    ("arange", lambda m, **kw: m.arange(5, **kw)),
    ("linspace", lambda m, **kw: m.linspace(0, 1, 5, **kw)),
    ("eye", lambda m, **kw: m.eye(3, **kw)),
    ("randn", lambda m, **kw: m.randn(2, 2, **kw)),
    ("rand", lambda m, **kw: m.rand(2, **kw)),
    ("randint", lambda m, **kw: m.randint(5, (3,), **kw)),
    ("randperm", lambda m, **kw: m.randperm(4, **kw)),
    ("zeros_like", lambda m, **kw: m.zeros_like(m.ones(2), **kw)),
    ("ones_like", lambda m, **kw: m.ones_like(m.ones(2), **kw)),
    ("empty_like", lambda m, **kw: m.empty_like(m.ones(2), **kw)),
    ("full_like", lambda m, **kw: m.full_like(m.ones(2), 3, **kw)),
    ("randn_like", lambda m, **kw: m.randn_like(m.ones(2), **kw)),
    ("rand_like", lambda m, **kw: m.rand_like(m.ones(2), **kw)),
    ("randint_like", lambda m, **kw: m.randint_like(m.ones(2), 2, 5, **kw)),
]


@pytest.mark.parametrize("name, make", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_factories_take_a_cpu_device_and_refuse_cuda_as_torch(name, make):
    for device in ("cpu", torch.device("cpu")):
        theirs = make(torch, device=device)
        ours = make(mg, device=device if isinstance(device, str) else mg.device("cpu"))
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert ours.type() == theirs.type()
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        make(torch, device="cuda")
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        make(mg, device="cuda:0")


def test_dtype_aliases_are_torchs():
    for name in ("float", "long", "double", "int", "short", "half", "cfloat", "cdouble",
                 "float32", "int64", "uint8", "int8", "bool", "complex64"):
        ours, theirs = getattr(mg, name), getattr(torch, name)
        assert mg.zeros(1, dtype=ours).type() == torch.zeros(1, dtype=theirs).type() or \
            name in ("cfloat", "cdouble", "complex64"), name
        assert ours.itemsize == theirs.itemsize, name


@pytest.mark.parametrize("ctor", ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor",
                                  "BoolTensor", "ByteTensor", "ShortTensor", "HalfTensor"])
def test_legacy_constructors(ctor):
    ours, theirs = getattr(mg, ctor), getattr(torch, ctor)
    for args in [(2, 3), ([1, 0, 1],), ((2, 3),), ()]:
        o, t = ours(*args), theirs(*args)
        assert tuple(o.shape) == tuple(t.shape) and o.type() == t.type()
        if args and isinstance(args[0], (list, tuple)):
            np.testing.assert_array_equal(o.data, t.numpy())
        assert isinstance(o, ours) and isinstance(o, mg.Tensor)
    for dtype in ("float32", "int64", "bool"):
        assert isinstance(mg.zeros(1, dtype=getattr(mg, dtype)), ours) == \
            isinstance(torch.zeros(1, dtype=getattr(torch, dtype)), theirs)
    assert ours(2, device="cpu").type() == theirs(2, device="cpu").type()
    _raises_alike(lambda: ours(2, device="cuda"), lambda: theirs(2, device="cuda"))
    same = mg.zeros(2, dtype=ours.dtype)
    assert ours(same) is same
    _raises_alike(lambda: ours(2.5), lambda: theirs(2.5))
    other = "int64" if ctor != "LongTensor" else "float32"
    _raises_alike(lambda: ours(mg.zeros(2, dtype=getattr(mg, other))),
                  lambda: theirs(torch.zeros(2, dtype=getattr(torch, other))))


def test_tensor_type_with_and_without_argument():
    o, t = mg.tensor([1.5, -2.5]), torch.tensor([1.5, -2.5])
    assert o.type() == t.type() == "torch.FloatTensor"
    for ours_arg, theirs_arg in [("torch.LongTensor", "torch.LongTensor"),
                                 ("torch.DoubleTensor", "torch.DoubleTensor"),
                                 (mg.IntTensor, torch.IntTensor), (mg.long, torch.long)]:
        converted, expected = o.type(ours_arg), t.type(theirs_arg)
        assert converted.type() == expected.type()
        np.testing.assert_array_equal(converted.data, expected.numpy())
    _raises_alike(lambda: o.type("foo"), lambda: t.type("foo"))
    _raises_alike(lambda: o.type("torch.cuda.FloatTensor"),
                  lambda: t.type("torch.cuda.FloatTensor"))


def test_randint_signatures():
    for args, kwargs in [((5, (3,)), {}), ((2, 5, (3, 2)), {}), ((5,), dict(size=(4,))),
                         ((), dict(low=2, high=5, size=(3,))), ((), dict(high=5, size=[3])),
                         ((5, (3,)), dict(dtype="int32"))]:
        dtype = kwargs.pop("dtype", None)
        o = mg.randint(*args, **kwargs, dtype=getattr(mg, dtype) if dtype else None)
        t = torch.randint(*args, **kwargs, dtype=getattr(torch, dtype) if dtype else None)
        assert tuple(o.shape) == tuple(t.shape) and o.type() == t.type()
        low = kwargs.get("low", args[0] if len(args) == 3 else 0)
        high = kwargs.get("high", args[1] if len(args) == 3 else args[0] if args else None)
        assert (o.data >= low).all() and (o.data < high).all()
    draws = mg.randint(3, (2000,)).data
    assert set(np.unique(draws)) == {0, 1, 2}  # (high, size) is not (low, high)
    _raises_alike(lambda: mg.randint(5, 3), lambda: torch.randint(5, 3))
    _raises_alike(lambda: mg.randint(5, 2, (3,)), lambda: torch.randint(5, 2, (3,)))


def test_like_factories_keep_shape_and_dtype():
    for dtype in ("float32", "float64"):
        o, t = mg.ones(3, 2, dtype=getattr(mg, dtype)), torch.ones(3, 2, dtype=getattr(torch, dtype))
        for name in ("randn_like", "rand_like"):
            assert getattr(mg, name)(o).type() == getattr(torch, name)(t).type()
        assert mg.randint_like(o, 7).type() == torch.randint_like(t, 7).type()
    assert 0 <= mg.rand_like(mg.ones(1000)).data.min() and mg.rand_like(mg.ones(1000)).data.max() < 1
    drawn = mg.randint_like(mg.ones(1000), 2, 5).data
    assert set(np.unique(drawn)) == {2.0, 3.0, 4.0}
    _raises_alike(lambda: mg.randn_like(mg.zeros(2, dtype=mg.long)),
                  lambda: torch.randn_like(torch.zeros(2, dtype=torch.long)))
    assert mg.zeros_like(mg.ones(2), requires_grad=True).requires_grad


def test_random_():
    for dtype, args, kwargs in [("float32", (), {}), ("float64", (10,), {}),
                                ("int64", (2, 5), {}), ("int32", (), dict(to=7)),
                                ("float32", (), {"from": 3, "to": 6})]:
        o = mg.zeros(500, dtype=getattr(mg, dtype))
        t = torch.zeros(500, dtype=getattr(torch, dtype))
        assert o.random_(*args, **kwargs) is o
        t.random_(*args, **kwargs)
        assert o.type() == t.type()
        assert (o.data == np.round(o.data)).all() and o.data.min() >= 0
        if args or kwargs:  # a bounded draw: the same range as torch's
            low = kwargs.get("from", args[0] if len(args) == 2 else 0)
            high = kwargs.get("to", args[-1] if args else None)
            assert o.data.min() >= low and o.data.max() < high
            assert t.min() >= low and t.max() < high
    assert mg.zeros(200).random_().data.max() <= 2 ** 24
    assert mg.zeros(200).random_().data.max() > 2 ** 16  # drawn across the whole range
    _raises_alike(lambda: mg.zeros(2).random_(5, 2), lambda: torch.zeros(2).random_(5, 2))


def test_narrow():
    o, t = mg.arange(24).reshape(4, 6), torch.arange(24).reshape(4, 6)
    for args in [(0, 1, 2), (1, -3, 3), (-1, 0, 6), (1, mg.tensor(2), 3)]:
        targs = tuple(torch.tensor(a.item()) if isinstance(a, mg.Tensor) else a for a in args)
        np.testing.assert_array_equal(o.narrow(*args).data, t.narrow(*targs).numpy())
    _raises_alike(lambda: o.narrow(1, 4, 3), lambda: t.narrow(1, 4, 3))
    _raises_alike(lambda: o.narrow(2, 0, 1), lambda: t.narrow(2, 0, 1))
    _raises_alike(lambda: o.narrow(1, 7, 1), lambda: t.narrow(1, 7, 1))
    view = o.narrow(1, 1, 2)
    view[0, 0] = 100
    assert o.data[0, 1] == 100  # a view, as torch's


@pytest.mark.parametrize("dtype", ["int64", "float32", "float64"])
def test_modulo_and_fmod_follow_torch_for_negatives(dtype):
    values = [-7, -3, -1, 0, 2, 5, 8]
    o, t = mg.tensor(values, dtype=getattr(mg, dtype)), torch.tensor(values, dtype=getattr(torch, dtype))
    for divisor in (3, -3):
        for ours, theirs in [(o % divisor, t % divisor), (divisor % (o + 10), divisor % (t + 10)),
                             (mg.remainder(o, divisor), torch.remainder(t, divisor)),
                             (mg.fmod(o, divisor), torch.fmod(t, divisor)),
                             (o.fmod(mg.tensor(divisor, dtype=o.dtype)),
                              t.fmod(torch.tensor(divisor, dtype=t.dtype)))]:
            assert ours.type() == theirs.type()
            np.testing.assert_array_equal(ours.data, theirs.numpy())
    if dtype == "int64":
        _raises_alike(lambda: o % 0, lambda: t % 0)
    else:
        np.testing.assert_array_equal((o % 0).data, (t % 0).numpy())
    x, y = mg.tensor([5.5, -2.5], requires_grad=True), torch.tensor([5.5, -2.5], requires_grad=True)
    (x % 2).sum().backward()
    (y % 2).sum().backward()
    np.testing.assert_array_equal(x.grad.data, y.grad.numpy())


def test_format():
    for spec in (".4f", "", "8.2e", ">10"):
        assert f"{mg.tensor(1.23456):{spec}}" == f"{torch.tensor(1.23456):{spec}}"
    assert f"{mg.tensor(3):5d}" == f"{torch.tensor(3):5d}"
    loss = mg.tensor(2.0, requires_grad=True) * 1.5
    assert f"{loss:.4f}" == "3.0000"
    for values in ([1.5], [1.5, 2.0], [[1.5]]):
        _raises_alike(lambda: format(mg.tensor(values), ".2f"),
                      lambda: format(torch.tensor(values), ".2f"))
    assert f"{mg.tensor([1.5, 2.0])}" == str(mg.tensor([1.5, 2.0]))


def test_cuda_is_refused_as_torchs_cpu_build():
    assert mg.zeros(1).is_cuda is torch.zeros(1).is_cuda is False
    for target in (mg.zeros(2), mg.nn.Linear(2, 2)):
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            target.cuda()
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        torch.zeros(2).cuda()
