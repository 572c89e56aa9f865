"""Optimizers and gradient utilities on sparse gradients (Embedding(sparse=True)), against
torch: SparseAdam, SGD and Adagrad update the looked-up rows as torch's do; the others raise
torch's error; clipping and zero_grad behave as torch's."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn

torch = pytest.importorskip("torch")

BATCHES = [[1, 3, 1, 0], [3, 4], [4, 4, 1], [2]]


def _models(dtype):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 3)).astype(dtype)
    head = rng.standard_normal(3).astype(dtype)
    mine = nn.Embedding(6, 3, sparse=True, _weight=mg.tensor(weight.copy()))
    theirs = torch.nn.Embedding(6, 3, sparse=True, _weight=torch.tensor(weight.copy()))
    return (mine, mg.tensor(head)), (theirs, torch.tensor(head))


def _train(lib, model, head, optimizer, batches):
    for batch in batches:
        optimizer.zero_grad()
        loss = (model(lib.tensor(batch)) @ head).tanh().sum()
        loss.backward()
        optimizer.step()
    return model.weight.detach().numpy()


CASES = [("SparseAdam", {}), ("SparseAdam", {"maximize": True, "betas": (0.8, 0.9)}),
         ("SGD", {}), ("SGD", {"momentum": 0.9}), ("SGD", {"momentum": 0.9, "nesterov": True}),
         ("SGD", {"momentum": 0.5, "dampening": 0.3, "maximize": True}),
         ("Adagrad", {}), ("Adagrad", {"lr_decay": 0.1, "maximize": True})]


@pytest.mark.parametrize("name, kwargs", CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparse_steps_equal_torchs(name, kwargs, dtype):
    (mine, mine_head), (theirs, theirs_head) = _models(dtype)
    ours = _train(mg, mine, mine_head, getattr(mg.optim, name)(mine.parameters(), lr=0.1,
                                                                **kwargs), BATCHES)
    reference = _train(torch, theirs, theirs_head,
                       getattr(torch.optim, name)(theirs.parameters(), lr=0.1, **kwargs),
                       BATCHES)
    if dtype == np.float64:
        np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=1e-14)
    else:
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)


def test_lbfgs_takes_a_sparse_gradient_as_dense_as_torchs():
    results = []
    for lib, (model, head) in zip((mg, torch), _models(np.float64)):
        optimizer = lib.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)

        def closure():
            optimizer.zero_grad()
            loss = (model(lib.tensor([1, 3, 1])) @ head).tanh().sum()
            loss.backward()
            return loss
        optimizer.step(closure)
        results.append(model.weight.detach().numpy())
    np.testing.assert_allclose(*results, rtol=1e-10, atol=1e-12)


def test_sparse_adam_is_lazy_and_keeps_torchs_state():
    (mine, head), (theirs, theirs_head) = _models(np.float64)
    start = mine.weight.detach().numpy().copy()
    optimizer = mg.optim.SparseAdam(mine.parameters(), lr=0.01)
    reference = torch.optim.SparseAdam(theirs.parameters(), lr=0.01)
    _train(mg, mine, head, optimizer, BATCHES[:2])
    _train(torch, theirs, theirs_head, reference, BATCHES[:2])
    # Rows 2 and 5 were never looked up: they and their moments are untouched.
    np.testing.assert_array_equal(mine.weight.detach().numpy()[[2, 5]], start[[2, 5]])
    state, expected = optimizer.state[mine.weight], reference.state[theirs.weight]
    assert state["step"] == expected["step"] == 2
    for key in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_allclose(state[key].numpy(), expected[key].numpy(), rtol=1e-12)
        assert not state[key].numpy()[[2, 5]].any()


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop",
                                  "Adadelta"])
def test_optimizers_without_a_sparse_step_raise_torchs_error(name):
    for lib, (model, head) in zip((mg, torch), _models(np.float64)):
        dense = lib.nn.Linear(3, 1)
        before = dense.weight.detach().numpy().copy()
        optimizer = getattr(lib.optim, name)([{"params": list(dense.parameters())
                                               + [model.weight]}])
        (model(lib.tensor([1, 2])).sum() + dense(lib.ones(3)).sum()).backward()
        message = ("Adam does not support sparse gradients, please consider SparseAdam instead"
                   if name.startswith("Adam") and name != "Adamax"
                   else f"{name} does not support sparse gradients")
        with pytest.raises(RuntimeError, match=message):
            optimizer.step()
        # Nothing of the group was updated before the refusal.
        np.testing.assert_array_equal(dense.weight.detach().numpy(), before)


def test_sparse_optimizers_refuse_what_torchs_refuse():
    for lib, (model, head) in zip((mg, torch), _models(np.float64)):
        model(lib.tensor([1, 2])).sum().backward()
        with pytest.raises(RuntimeError, match="add\\(sparse, dense\\) is not supported"):
            lib.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1).step()
        with pytest.raises(RuntimeError, match="weight_decay option is not compatible with "
                                               "sparse gradients"):
            lib.optim.Adagrad(model.parameters(), weight_decay=0.1).step()
        linear = lib.nn.Linear(2, 2)
        linear(lib.ones(2)).sum().backward()
        with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients"):
            lib.optim.SparseAdam(linear.parameters()).step()
        for kwargs, match in [({"lr": -1}, "Invalid learning rate: -1"),
                              ({"eps": 0.0}, "Invalid epsilon value: 0.0"),
                              ({"betas": (1.0, 0.9)}, "Invalid beta parameter at index 0"),
                              ({"betas": (0.9, -1)}, "Invalid beta parameter at index 1")]:
            with pytest.raises(ValueError, match=match):
                lib.optim.SparseAdam(model.parameters(), **kwargs)
    with pytest.raises(ValueError, match="SparseAdam requires dense parameter tensors"):
        mg.optim.SparseAdam([mg.sparse_coo_tensor([[0]], [1.0], (2,))])


def test_zero_grad_and_clipping_on_a_sparse_gradient_are_torchs():
    for lib, (model, head) in zip((mg, torch), _models(np.float64)):
        model(lib.tensor([1, 3, 1])).sum().backward()
        grad = model.weight.grad
        model.zero_grad(set_to_none=False)
        assert model.weight.grad is grad and grad.is_sparse and grad._nnz() == 0
        assert grad.is_coalesced()
        model(lib.tensor([1])).sum().backward()
        lib.optim.SGD(model.parameters()).zero_grad(set_to_none=False)
        assert model.weight.grad._nnz() == 0
        model(lib.tensor([1])).sum().backward()
        # torch has no sparse norm or clamp kernels: both clippers raise NotImplementedError.
        with pytest.raises(NotImplementedError):
            lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with pytest.raises(NotImplementedError):
            lib.nn.utils.clip_grad_value_(model.parameters(), 0.5)


def test_grad_scaler_unscales_a_sparse_gradient_as_torchs():
    results = []
    for lib, (model, head) in zip((mg, torch), _models(np.float32)):
        optimizer = lib.optim.SGD(model.parameters(), lr=0.1)
        scaler = lib.amp.GradScaler("cpu", init_scale=1024.0)
        for batch in BATCHES:
            optimizer.zero_grad()
            scaler.scale((model(lib.tensor(batch)) @ head).tanh().sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        assert model.weight.grad.is_sparse
        results.append(model.weight.detach().numpy())
    np.testing.assert_allclose(*results, rtol=1e-6, atol=1e-7)
