"""`Tensor.data` as torch's: a tensor on the same storage, outside autograd, with a version
counter of its own, and `t.data = other` rebinding the storage. Each case runs the same steps
on mpigrad and on torch and compares values, flags and errors."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn

torch = pytest.importorskip("torch")


def both(array, requires_grad=False):
    """The same float64 values as an mpigrad and a torch tensor."""
    array = np.asarray(array, dtype=np.float64)
    return (mg.tensor(array.copy(), requires_grad=requires_grad),
            torch.tensor(array.copy(), requires_grad=requires_grad))


def flags(t):
    return (t.requires_grad, t.grad_fn is None, t.is_leaf, t._base is None, t._version)


@pytest.mark.parametrize("make", ["leaf", "leaf_requiring_grad", "parameter", "non_leaf",
                                  "view"])
def test_data_is_an_untracked_tensor_on_the_same_storage(make):
    ours, theirs = both([[1.0, -2.0], [3.0, 4.0]], requires_grad=make != "leaf")
    if make == "parameter":
        ours, theirs = nn.Parameter(ours.detach()), torch.nn.Parameter(theirs.detach())
    elif make == "non_leaf":
        ours, theirs = ours * 2, theirs * 2
    elif make == "view":
        ours, theirs = ours[1], theirs[1]
    data, expected = ours.data, theirs.data
    assert type(data) is mg.Tensor and type(expected) is torch.Tensor
    assert flags(data) == flags(expected) == (False, True, True, True, 0)
    np.testing.assert_array_equal(data.numpy(), expected.numpy())
    data.mul_(10.0)
    expected.mul_(10.0)
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    assert np.shares_memory(data.numpy(), ours.detach().numpy())
    assert ours._version == theirs._version and ours.requires_grad == theirs.requires_grad
    assert (ours.grad_fn is None) == (theirs.grad_fn is None)


def test_a_write_through_data_after_a_save_for_backward_is_not_an_error():
    # torch's documented way to change a saved tensor without autograd noticing: the write
    # goes through its own version counter, and backward uses the new values.
    (x, tx) = both([1.0, 2.0, 3.0], requires_grad=True)
    y, ty = (x * x).sum(), (tx * tx).sum()
    x.data.mul_(2.0)
    tx.data.mul_(2.0)
    assert x._version == tx._version == 0
    y.backward()
    ty.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=0, atol=0)


def test_detach_shares_the_version_counter_where_data_does_not():
    for lib in (mg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x * 1.0
        y = h.sin().sum()
        h.detach().add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            y.backward()
        h2 = x * 1.0
        y2 = h2.sin().sum()
        h2.data.add_(1.0)
        y2.backward()


def test_data_under_no_grad_and_in_place_idioms_match_torch():
    ours, theirs = both(np.linspace(-3, 3, 12).reshape(3, 4), requires_grad=True)
    ours, theirs = nn.Parameter(ours.detach()), torch.nn.Parameter(theirs.detach())
    with mg.no_grad():
        inside = ours.data
    with torch.no_grad():
        expected = theirs.data
    assert flags(inside) == flags(expected)
    grad = np.full((3, 4), 0.5)
    for p, g in ((ours, mg.tensor(grad)), (theirs, torch.tensor(grad))):
        p.data.add_(g, alpha=-0.1)
        p.data.clamp_(-2.0, 2.0)
        p.data[0].fill_(0)
        p.data.mul_(3.0).sub_(1.0)
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    assert ours._version == theirs._version == 0 and ours.requires_grad and ours.is_leaf
    assert np.shares_memory(ours.data.numpy(), ours.detach().numpy())


def test_copy_and_random_fills_through_data_write_into_the_parameter():
    source, _ = both([[0.5, 0.25], [2.0, 4.0]])
    layer = nn.Linear(2, 2, dtype=mg.float64)
    storage = layer.weight.detach().numpy()
    version = layer.weight._version
    layer.weight.data.copy_(source.data)
    layer.bias.data.fill_(0)
    np.testing.assert_array_equal(storage, source.numpy())
    np.testing.assert_array_equal(layer.bias.detach().numpy(), [0.0, 0.0])
    layer.weight.data.normal_(0.0, 0.02)
    layer.bias.data.uniform_(-1.0, 1.0)
    assert layer.weight.detach().numpy() is storage and not np.array_equal(storage,
                                                                          source.numpy())
    assert np.all(np.abs(layer.bias.detach().numpy()) <= 1.0)
    assert layer.weight._version == version and layer.weight.requires_grad


def test_numpy_of_data_shares_memory_even_when_the_tensor_requires_grad():
    ours, theirs = both([1.0, 2.0], requires_grad=True)
    array, expected = ours.data.numpy(), theirs.data.numpy()
    array[0] = expected[0] = 7.0
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())


def test_setting_data_rebinds_the_storage_as_torch_does():
    for lib in (mg, torch):
        x = lib.ones(3)
        x.add_(1.0)
        old_version = x._version
        replacement = lib.zeros(5, dtype=lib.float64)
        x.data = replacement
        assert tuple(x.shape) == (5,) and x.dtype == lib.float64 and x._version == old_version
        replacement.fill_(2.0)  # the same storage now
        assert x.tolist() == [2.0] * 5


def test_setting_data_keeps_the_autograd_state():
    ours, theirs = both([1.0, 2.0], requires_grad=True)
    for p, lib in ((ours, mg), (theirs, torch)):
        p.data = p.data.to(lib.float32)
        assert p.requires_grad and p.is_leaf and p.dtype == lib.float32
        (p * p).sum().backward()
        assert p.grad.tolist() == [2.0, 4.0]
    # A non-leaf keeps its history; the source's requires_grad is not taken over.
    for lib in (mg, torch):
        a = lib.ones(3, requires_grad=True)
        b = a * 2
        b.data = lib.zeros(3)
        assert b.grad_fn is not None and b.tolist() == [0.0, 0.0, 0.0]
        c = lib.ones(2)
        c.data = lib.ones(2, requires_grad=True)
        assert not c.requires_grad


@pytest.mark.parametrize("value, error", [([1.0, 2.0], TypeError),
                                          (np.zeros(2), TypeError),
                                          ("int_tensor", RuntimeError)])
def test_setting_data_refuses_what_torch_refuses(value, error):
    for lib in (mg, torch):
        p = lib.ones(2, requires_grad=True)
        bad = lib.tensor([1, 2]) if isinstance(value, str) else value
        with pytest.raises(error):
            p.data = bad
        assert p.dtype == lib.float32 and p.tolist() == [1.0, 1.0]


def _pair_of_models():
    ours = nn.Sequential(nn.Linear(3, 4, dtype=mg.float64), nn.Tanh(),
                         nn.Linear(4, 1, dtype=mg.float64))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4, dtype=torch.float64), torch.nn.Tanh(),
                                 torch.nn.Linear(4, 1, dtype=torch.float64))
    for p, q in zip(ours.parameters(), theirs.parameters()):
        q.data.copy_(torch.from_numpy(p.detach().numpy().copy()))
    return ours, theirs


def test_a_hand_written_sgd_loop_over_data_equals_torch():
    rng = np.random.default_rng(0)
    inputs, targets = rng.normal(size=(8, 3)), rng.normal(size=(8, 1))
    ours, theirs = _pair_of_models()
    for _ in range(3):
        for model, lib in ((ours, mg), (theirs, torch)):
            model.zero_grad()
            loss = ((model(lib.tensor(inputs)) - lib.tensor(targets)) ** 2).mean()
            loss.backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12,
                                   atol=1e-14)


def test_state_dict_and_optimizer_see_writes_through_data():
    ours, theirs = _pair_of_models()
    for model in (ours, theirs):
        for p in model.parameters():
            p.data.mul_(0.5)
    for (key, value), (tkey, tvalue) in zip(ours.state_dict().items(),
                                            theirs.state_dict().items()):
        assert key == tkey and not value.requires_grad
        np.testing.assert_array_equal(value.numpy(), tvalue.numpy())
    optimizers = (mg.optim.Adam(ours.parameters(), lr=0.01),
                  torch.optim.Adam(theirs.parameters(), lr=0.01))
    inputs = np.linspace(-1, 1, 6).reshape(2, 3)
    for (model, opt), lib in zip(zip((ours, theirs), optimizers), (mg, torch)):
        for _ in range(2):
            opt.zero_grad()
            model(lib.tensor(inputs)).pow(2).sum().backward()
            opt.step()
        model[0].weight.data.clamp_(-0.1, 0.1)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12,
                                   atol=1e-14)
    for (_, a), (_, b) in zip(optimizers[0].state_dict()["state"].items(),
                              optimizers[1].state_dict()["state"].items()):
        np.testing.assert_allclose(a["exp_avg"].numpy(), b["exp_avg"].numpy(), rtol=1e-12)
    copy = nn.Sequential(nn.Linear(3, 4, dtype=mg.float64), nn.Tanh(),
                         nn.Linear(4, 1, dtype=mg.float64))
    copy.load_state_dict(ours.state_dict())
    for p, q in zip(copy.parameters(), ours.parameters()):
        np.testing.assert_array_equal(p.data.numpy(), q.data.numpy())
