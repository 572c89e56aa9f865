"""The same models and losses as torch, with the same weights and data, in float64."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.nn import functional as F

torch = pytest.importorskip("torch")
tnn = torch.nn

TOL = dict(rtol=1e-10, atol=1e-10)


def to_torch(t, requires_grad=False):
    return torch.tensor(t.detach().numpy().copy(), requires_grad=requires_grad)


def leaf_pair(*shape):
    """A random float64 leaf and its torch twin, both requiring grad."""
    x = mg.randn(*shape, requires_grad=True)
    return x, to_torch(x, requires_grad=True)


def assert_same_forward_and_backward(out, tout, inputs, tinputs):
    """The outputs agree, and backward from one random output gradient gives every input the
    same gradient in both libraries."""
    np.testing.assert_allclose(out.data, tout.detach().numpy(), **TOL)
    g = mg.randn(*out.shape)
    out.backward(g)
    tout.backward(to_torch(g))
    for x, tx in zip(inputs, tinputs):
        np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), **TOL)


def copy_weights(ours, theirs):
    """Load our parameters and buffers into the torch module (made float64 first, so nothing
    is rounded); the names must agree."""
    theirs.double()
    state = {k: torch.tensor(v.detach().numpy().copy()) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(state, strict=True)


def assert_same_state(ours, theirs, grads=True):
    their_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.data, their_params[name].detach().numpy(), **TOL)
        if grads:
            np.testing.assert_allclose(p.grad.data, their_params[name].grad.numpy(), **TOL,
                                       err_msg=f"gradient of {name}")
    their_buffers = dict(theirs.named_buffers())
    for name, b in ours.named_buffers():
        np.testing.assert_allclose(b.data, their_buffers[name].numpy(), **TOL, err_msg=name)


def train_step(model, loss_fn, x, y, lr=0.1):
    """One SGD step; returns the loss and the input gradient (library-neutral)."""
    model.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    return loss, x.grad, grads


def compare_training_step(ours, theirs, x_shape, classes, steps=2, seed=0):
    copy_weights(ours, theirs)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        x = mg.tensor(rng.standard_normal(x_shape), requires_grad=True)
        y = mg.tensor(rng.integers(0, classes, x_shape[0]))
        tx, ty = to_torch(x, requires_grad=True), torch.tensor(y.detach().numpy())
        loss = F.cross_entropy(ours(x), y)
        tloss = torch.nn.functional.cross_entropy(theirs(tx), ty)
        loss.backward()
        tloss.backward()
        np.testing.assert_allclose(loss.item(), tloss.item(), **TOL)
        np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), **TOL)
        assert_same_state(ours, theirs)
        # A plain SGD step on both, so the second step compares from moved weights.
        with mg.no_grad(), torch.no_grad():
            for p in ours.parameters():
                p.sub_(p.grad * 0.1)
                p.grad = None
            for p in theirs.parameters():
                p.sub_(p.grad * 0.1)
                p.grad = None


def test_mlp_training_step_matches_torch():
    ours = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh(),
                         nn.Linear(8, 3))
    theirs = tnn.Sequential(tnn.Linear(6, 16), tnn.ReLU(), tnn.Linear(16, 8), tnn.Tanh(),
                            tnn.Linear(8, 3))
    compare_training_step(ours, theirs, (12, 6), 3)


def make_cnn(lib):
    return lib.Sequential(
        lib.Conv2d(2, 4, 3, padding=1), lib.BatchNorm2d(4), lib.ReLU(), lib.MaxPool2d(2),
        lib.Conv2d(4, 6, (3, 2), stride=2, padding=1), lib.ReLU(), lib.AvgPool2d(2),
        lib.Flatten(), lib.Linear(6, 5), lib.BatchNorm1d(5), lib.GELU(),
        lib.Linear(5, 3))


def test_cnn_training_step_matches_torch():
    ours, theirs = make_cnn(nn), make_cnn(tnn)
    compare_training_step(ours, theirs, (4, 2, 9, 10), 3)
    # Eval mode uses the running statistics both libraries accumulated over the two steps.
    ours.eval()
    theirs.eval()
    x = mg.randn(3, 2, 9, 10)
    np.testing.assert_allclose(ours(x).data, theirs(to_torch(x)).detach().numpy(), **TOL)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("kwargs", [
    dict(stride=1, padding=0), dict(stride=2, padding=1), dict(stride=(2, 1), padding=(0, 2)),
    dict(dilation=2, padding=2), dict(groups=2), dict(padding="same"),
    dict(padding="same", dilation=(1, 2)), dict(padding="valid", bias=False)])
def test_conv2d_matches_torch(kwargs):
    ours = nn.Conv2d(4, 6, (3, 4), **kwargs)
    theirs = tnn.Conv2d(4, 6, (3, 4), **kwargs)
    copy_weights(ours, theirs)
    x, tx = leaf_pair(2, 4, 9, 8)
    assert_same_forward_and_backward(ours(x), theirs(tx), [x], [tx])
    assert_same_state(ours, theirs)


def test_conv2d_unbatched_matches_torch():
    ours, theirs = nn.Conv2d(3, 2, 2), tnn.Conv2d(3, 2, 2)
    copy_weights(ours, theirs)
    x = mg.randn(3, 5, 5)
    np.testing.assert_allclose(ours(x).data, theirs(to_torch(x)).detach().numpy(), **TOL)


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(2, 3), stride=(1, 2)), dict(kernel_size=3, dilation=2),
    dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=2, padding=1, ceil_mode=True)])
def test_max_pool2d_matches_torch(kwargs):
    x, tx = leaf_pair(2, 3, 9, 8)
    out, indices = F.max_pool2d(x, return_indices=True, **kwargs)
    tout, tindices = torch.nn.functional.max_pool2d(tx, return_indices=True, **kwargs)
    np.testing.assert_array_equal(out.data, tout.detach().numpy())
    np.testing.assert_array_equal(indices.data, tindices.numpy())
    g = mg.randn(*out.shape)
    out.backward(g)
    tout.backward(to_torch(g))
    # Overlapping windows may add up an input's gradient in another order.
    np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), **TOL)


def test_max_pool2d_picks_the_same_winner_as_torch_for_ties_and_a_nan():
    data = np.ones((1, 2, 4, 4))
    data[0, 1, 0, 1] = np.nan
    x = mg.tensor(data, requires_grad=True)
    tx = to_torch(x, requires_grad=True)
    out, indices = F.max_pool2d(x, 2, return_indices=True)
    tout, tindices = torch.nn.functional.max_pool2d(tx, 2, return_indices=True)
    np.testing.assert_array_equal(out.data, tout.detach().numpy())
    np.testing.assert_array_equal(indices.data, tindices.numpy())
    out.backward(mg.ones(*out.shape))
    tout.backward(torch.ones(tout.shape, dtype=torch.float64))
    np.testing.assert_array_equal(x.grad.data, tx.grad.numpy())


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=2, divisor_override=3)])
def test_avg_pool2d_matches_torch(kwargs):
    x, tx = leaf_pair(2, 3, 9, 8)
    assert_same_forward_and_backward(F.avg_pool2d(x, **kwargs),
                                     torch.nn.functional.avg_pool2d(tx, **kwargs), [x], [tx])


def test_unfold_and_fold_match_torch():
    x = mg.randn(2, 3, 7, 6)
    kw = dict(kernel_size=(2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
    cols = F.unfold(x, **kw)
    tcols = torch.nn.functional.unfold(to_torch(x), **kw)
    np.testing.assert_array_equal(cols.data, tcols.numpy())
    np.testing.assert_allclose(F.fold(cols, (7, 6), **kw).data,
                               torch.nn.functional.fold(tcols, (7, 6), **kw).numpy(), **TOL)


@pytest.mark.parametrize("make", [
    lambda lib: lib.BatchNorm1d(3), lambda lib: lib.BatchNorm1d(3, momentum=None),
    lambda lib: lib.BatchNorm1d(3, affine=False),
    lambda lib: lib.BatchNorm1d(3, track_running_stats=False)])
@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6)])
def test_batch_norm1d_train_then_eval_matches_torch(make, shape):
    ours, theirs = make(nn), make(tnn)
    copy_weights(ours, theirs)
    for _ in range(3):
        x, tx = leaf_pair(*shape)
        assert_same_forward_and_backward(ours(x), theirs(tx), [x], [tx])
    assert_same_state(ours, theirs)
    ours.eval()
    theirs.eval()
    x = mg.randn(*shape)
    np.testing.assert_allclose(ours(x).data, theirs(to_torch(x)).detach().numpy(), **TOL)


def test_layer_norm_matches_torch():
    ours, theirs = nn.LayerNorm((3, 4)), tnn.LayerNorm((3, 4)).double()
    with mg.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    copy_weights(ours, theirs)
    x, tx = leaf_pair(2, 5, 3, 4)
    assert_same_forward_and_backward(ours(x), theirs(tx), [x], [tx])
    assert_same_state(ours, theirs)


def test_embedding_with_padding_idx_matches_torch():
    ours, theirs = nn.Embedding(7, 3, padding_idx=2), tnn.Embedding(7, 3, padding_idx=2)
    copy_weights(ours, theirs)
    idx = mg.tensor([[1, 2, 1], [6, 0, 2]])
    g = mg.randn(2, 3, 3)
    ours(idx).backward(g)
    theirs(torch.tensor(idx.detach().numpy())).backward(to_torch(g))
    assert_same_state(ours, theirs)


def test_embedding_max_norm_matches_torch():
    ours, theirs = nn.Embedding(5, 4, max_norm=1.0), tnn.Embedding(5, 4, max_norm=1.0)
    copy_weights(ours, theirs)
    idx = mg.tensor([0, 3, 3])
    out, tout = ours(idx), theirs(torch.tensor(idx.detach().numpy()))
    np.testing.assert_allclose(out.data, tout.detach().numpy(), **TOL)
    assert_same_state(ours, theirs, grads=False)


@pytest.mark.parametrize("name,kwargs", [
    ("ReLU", {}), ("LeakyReLU", dict(negative_slope=0.2)), ("GELU", {}),
    ("GELU", dict(approximate="tanh")), ("SiLU", {}), ("Tanh", {}), ("Sigmoid", {}),
    ("Softmax", dict(dim=1)), ("LogSoftmax", dict(dim=-1))])
def test_activations_match_torch(name, kwargs):
    x, tx = leaf_pair(4, 5)
    assert_same_forward_and_backward(getattr(nn, name)(**kwargs)(x),
                                     getattr(tnn, name)(**kwargs)(tx), [x], [tx])


# ----------------------------------------------------------------------------- losses
def class_problem(shape, classes, ignore=False, seed=1):
    """Scores of shape (N, C, *shape[1:]) and int64 targets; some targets = -100 if ignore."""
    rng = np.random.default_rng(seed)
    n, rest = shape[0], shape[1:]
    scores = rng.standard_normal((n, classes) + rest)
    target = rng.integers(0, classes, (n,) + rest)
    if ignore:
        target.flat[::3] = -100
    return scores, target


def loss_case(fn, tfn, scores, target, **kwargs):
    x = mg.tensor(scores, requires_grad=True)
    tx = torch.tensor(scores, requires_grad=True)
    assert_same_forward_and_backward(fn(x, mg.tensor(target), **kwargs),
                                     tfn(tx, torch.tensor(target), **kwargs), [x], [tx])


REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [False, True])
@pytest.mark.parametrize("shape", [(6,), (3, 2, 2)])
def test_cross_entropy_matches_torch(reduction, smoothing, weighted, ignore, shape):
    scores, target = class_problem(shape, 4, ignore)
    weight = np.array([0.5, 2.0, 1.0, 3.0]) if weighted else None
    kwargs = dict(reduction=reduction, label_smoothing=smoothing)
    loss_case(lambda x, t: F.cross_entropy(x, t, None if weight is None else mg.tensor(weight),
                                           **kwargs),
              lambda x, t: torch.nn.functional.cross_entropy(
                  x, t, None if weight is None else torch.tensor(weight), **kwargs),
              scores, target)


def test_cross_entropy_module_matches_torch_with_custom_ignore_index():
    scores, target = class_problem((8,), 5)
    target[[1, 4]] = 3
    ours = nn.CrossEntropyLoss(mg.tensor([1.0, 2.0, 0.5, 1.0, 4.0]), ignore_index=3,
                               label_smoothing=0.1)
    theirs = tnn.CrossEntropyLoss(torch.tensor([1.0, 2.0, 0.5, 1.0, 4.0], dtype=torch.float64),
                                  ignore_index=3, label_smoothing=0.1)
    loss_case(ours, theirs, scores, target)


def test_cross_entropy_unbatched_matches_torch():
    scores = np.random.default_rng(0).standard_normal(5)
    loss_case(F.cross_entropy, torch.nn.functional.cross_entropy, scores, np.array(2),
              label_smoothing=0.3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.25])
def test_cross_entropy_probability_targets_match_torch(reduction, smoothing):
    rng = np.random.default_rng(2)
    scores = rng.standard_normal((4, 3, 2))
    probs = rng.dirichlet(np.ones(3), (4, 2)).transpose(0, 2, 1).copy()
    weight = np.array([1.0, 0.5, 2.0])
    kwargs = dict(reduction=reduction, label_smoothing=smoothing)
    loss_case(lambda x, t: F.cross_entropy(x, t, mg.tensor(weight), **kwargs),
              lambda x, t: torch.nn.functional.cross_entropy(x, t, torch.tensor(weight), **kwargs),
              scores, probs)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [False, True])
def test_nll_loss_matches_torch(reduction, weighted, ignore):
    scores, target = class_problem((5, 3), 4, ignore)
    log_probs = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    weight = mg.tensor([0.5, 2.0, 1.0, 3.0]) if weighted else None
    ours = nn.NLLLoss(weight, reduction=reduction)
    theirs = tnn.NLLLoss(None if weight is None else to_torch(weight), reduction=reduction)
    loss_case(ours, theirs, log_probs, target)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss_matches_torch(reduction):
    rng = np.random.default_rng(3)
    x = mg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    t = mg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    tx, tt = to_torch(x, True), to_torch(t, True)
    assert_same_forward_and_backward(nn.MSELoss(reduction=reduction)(x, t),
                                     tnn.MSELoss(reduction=reduction)(tx, tt), [x, t], [tx, tt])
