"""PyTorch idioms people write, run on both libraries; any difference must be one the README's
"Differences from PyTorch" table lists (by the idiom's name, in its first column), and every
listed difference must still be one (so the table stays true)."""
import pathlib
import re
import types
import warnings

import numpy as np
import pytest

import mpigrad
import mpigrad.nn.functional as mg_F

torch = pytest.importorskip("torch")

README = pathlib.Path(__file__).parents[1] / "README.md"


def _libraries():
    ours = types.SimpleNamespace(t=mpigrad, F=mg_F, nn=mpigrad.nn, optim=mpigrad.optim,
                                 data=mpigrad.utils.data, name="mpigrad")
    theirs = types.SimpleNamespace(t=torch, F=torch.nn.functional, nn=torch.nn,
                                   optim=torch.optim, data=torch.utils.data, name="torch")
    return ours, theirs


def _x(L, requires_grad=False):
    return L.t.tensor([[1.5, -2.0, 3.25], [0.5, 4.0, -1.0]], requires_grad=requires_grad)


def _grad(L, f):
    x = _x(L, requires_grad=True)
    f(x).sum().backward()
    return x.grad


IDIOMS = {
    # tensors and their methods
    "to(dtype)": lambda L: _x(L).to(L.t.float64).dtype,
    "to(device, dtype)": lambda L: _x(L).to("cpu", L.t.float64).dtype,
    "to(device, dtype=)": lambda L: _x(L).to("cpu", dtype=L.t.float64).dtype,
    "to(other)": lambda L: _x(L).to(L.t.zeros(1, dtype=L.t.int64)).dtype,
    "to('cuda')": lambda L: _x(L).to("cuda"),
    "to(0)": lambda L: _x(L).to(0),
    "device": lambda L: str(_x(L).device),
    "add alpha": lambda L: _x(L).add(_x(L), alpha=2),
    "sub alpha": lambda L: _x(L).sub(1.0, alpha=3),
    "div rounding": lambda L: L.t.tensor([7, -7]).div(2, rounding_mode="floor"),
    "addcmul": lambda L: _x(L).addcmul(_x(L), _x(L), value=0.5),
    "addcdiv": lambda L: _x(L).addcdiv(_x(L), _x(L) * 2, value=2),
    "lerp": lambda L: _x(L).lerp(L.t.zeros(2, 3), 0.25),
    "new_zeros": lambda L: _x(L).new_zeros(2, 2),
    "new_ones dtype": lambda L: _x(L).new_ones((2,), dtype=L.t.int64),
    "new_full": lambda L: _x(L).new_full((3,), 2.5),
    "new_tensor": lambda L: _x(L).new_tensor([1, 2]),
    "gather": lambda L: _x(L).gather(1, L.t.tensor([[2, 0], [1, 1]])),
    "index_select": lambda L: _x(L).index_select(1, L.t.tensor([2, 0])),
    "repeat": lambda L: _x(L).repeat(2, 1, 2),
    "topk": lambda L: tuple(_x(L).topk(2, dim=1)),
    "sort": lambda L: tuple(_x(L).sort(dim=0, descending=True)),
    "cumsum": lambda L: _x(L).cumsum(1),
    "prod": lambda L: _x(L).prod(1),
    "unbind": lambda L: _x(L).unbind(1),
    "floor ceil round": lambda L: (_x(L).floor(), _x(L).ceil(), (_x(L) * 1.3).round()),
    "view(-1)": lambda L: _x(L).view(-1),
    "argmax keepdim": lambda L: _x(L).argmax(dim=1, keepdim=True),
    "max(dim)": lambda L: tuple(_x(L).max(dim=1)),
    "eq sum item": lambda L: _x(L).eq(_x(L)).sum().item(),
    "flatten": lambda L: L.t.flatten(_x(L).reshape(1, 2, 3), 1),
    # gradients
    "grad of prod": lambda L: _grad(L, lambda x: x.prod(1)),
    "grad of cumsum": lambda L: _grad(L, lambda x: x.cumsum(0) * x),
    "grad of gather": lambda L: _grad(L, lambda x: x.gather(1, L.t.tensor([[2, 2], [0, 1]]))),
    "grad of topk": lambda L: _grad(L, lambda x: x.topk(2).values),
    "grad_fn name add": lambda L: (_x(L, True) + 1).grad_fn.name(),
    "grad_fn name mm": lambda L: (_x(L, True) @ _x(L).T).grad_fn.name(),
    "grad_fn name sum": lambda L: (_x(L, True).sum(), _x(L, True).sum(1))[1].grad_fn.name(),
    "grad_fn name linear": lambda L: L.F.linear(_x(L, True), L.t.ones(4, 3),
                                                L.t.ones(4)).grad_fn.name(),
    "grad_fn name conv": lambda L: L.F.conv2d(L.t.ones(1, 1, 3, 3, requires_grad=True),
                                              L.t.ones(1, 1, 2, 2)).grad_fn.name(),
    "Variable": lambda L: (__import__(L.name + ".autograd", fromlist=["Variable"])
                           .Variable(_x(L), requires_grad=True).requires_grad),
    # functional and layers
    "log_softmax no dim": lambda L: L.F.log_softmax(_x(L)),
    "softmax no dim 3d": lambda L: L.F.softmax(_x(L).reshape(1, 2, 3)),
    "Dropout2d eval": lambda L: L.nn.Dropout2d(0.5).eval()(L.t.ones(1, 2, 2, 2)),
    "Dropout2d p=1": lambda L: L.nn.Dropout2d(1.0)(L.t.ones(1, 2, 2, 2)),
    "Module.to(float64)": lambda L: next(L.nn.Linear(2, 2).to(L.t.float64).parameters()).dtype,
    "Module.to('cuda')": lambda L: L.nn.Linear(2, 2).to("cuda"),
    "Module.to(int64)": lambda L: L.nn.Linear(2, 2).to(L.t.int64),
    # devices
    "cuda.is_available": lambda L: L.t.cuda.is_available(),
    "accelerator": lambda L: (L.t.accelerator.is_available(),
                              L.t.accelerator.current_accelerator()),
    "device('cuda:1')": lambda L: (str(L.t.device("cuda:1")), L.t.device("cuda", 1).index),
    "mps.is_available": lambda L: L.t.backends.mps.is_available(),
    # data
    "random_split fractions": lambda L: [len(s) for s in L.data.random_split(range(10),
                                                                             [0.3, 0.3, 0.4])],
    "DataLoader workers batch": lambda L: [b.tolist() for b in L.data.DataLoader(
        list(range(7)), batch_size=3)],
    "DataLoader len": lambda L: len(L.data.DataLoader(list(range(7)), batch_size=3,
                                                      drop_last=True)),
    "shuffle is a permutation": lambda L: sorted(int(i) for b in L.data.DataLoader(
        list(range(9)), batch_size=4, shuffle=True) for i in b),
    "shuffle order": lambda L: [int(i) for b in L.data.DataLoader(
        list(range(9)), batch_size=4, shuffle=True, generator=L.t.Generator().manual_seed(0))
        for i in b],
    "randn values": lambda L: (L.t.manual_seed(0), L.t.randn(3))[1],
    # optimizers
    "optimizer names": lambda L: [hasattr(L.optim, n) for n in ("Adadelta", "Adagrad",
                                                                "RMSprop", "SGD", "AdamW")],
    "Adagrad initial state": lambda L: sorted(L.optim.Adagrad([L.t.ones(2, requires_grad=True)])
                                              .state_dict()["state"][0]),
    "Adagrad step type": lambda L: type(L.optim.Adagrad([L.t.ones(2, requires_grad=True)])
                                        .state_dict()["state"][0]["step"]).__name__,
}


def _plain(value):
    """Something comparable across libraries: arrays, dtype names, Python values, or the name of
    the exception raised."""
    if isinstance(value, (torch.Tensor, mpigrad.Tensor)):
        return np.asarray(value.detach().numpy() if isinstance(value, torch.Tensor)
                          else value.detach().data)
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, (type, np.dtype)) and value is not type(None):
        try:
            return np.dtype(value).name
        except TypeError:
            return value.__name__
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__


def _outcome(idiom, L):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _plain(IDIOMS[idiom](L))
        except Exception as error:  # the exception type is the outcome being compared
            return f"raises {type(error).__name__}"


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and a.dtype == b.dtype and np.allclose(a, b, rtol=1e-6, atol=1e-6))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def deliberate_differences():
    """Idiom names in the first column of the README's differences table (`name` in code)."""
    text = README.read_text()
    section = text.split("## Differences from PyTorch", 1)[1].split("\n## ", 1)[0]
    return {match for row in section.splitlines() if row.startswith("| `")
            for match in re.findall(r"`([^`]+)`", row.split("|")[1])}


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_idiom_behaves_as_in_torch_or_is_a_listed_difference(idiom):
    ours, theirs = _libraries()
    a, b = _outcome(idiom, ours), _outcome(idiom, theirs)
    listed = idiom in deliberate_differences()
    if listed:
        assert not _same(a, b), (f"{idiom!r} now behaves as in torch ({a!r}); remove it from "
                                 "the README's differences table")
    else:
        assert _same(a, b), (f"{idiom!r}: mpigrad gives {a!r}, torch {b!r}; fix it, or list it "
                             "(with the reason) in the README's differences table")


def test_every_listed_difference_is_an_idiom_here():
    assert deliberate_differences() <= set(IDIOMS)
