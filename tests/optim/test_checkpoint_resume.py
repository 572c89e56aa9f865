"""Stop after epoch k, checkpoint, resume in fresh objects: the same final weights, bit for bit."""

import numpy as np
import pytest

from mpigrad import Tensor, optim
from mpigrad.optim import lr_scheduler
from mpigrad.serialization import load, save

EPOCHS, STEPS_PER_EPOCH, STOP_AFTER = 5, 4, 2
SIZES = (6, 8, 3)


def make_model(seed):
    rng = np.random.default_rng(seed)
    shapes = {"w1": (SIZES[1], SIZES[0]), "b1": (SIZES[1],),
              "w2": (SIZES[2], SIZES[1]), "b2": (SIZES[2],)}
    return {name: Tensor((rng.standard_normal(shape) * 0.5).astype(np.float32),
                         requires_grad=True)
            for name, shape in shapes.items()}


def loss_and_grads(model, x, y):
    """Mean squared error of a tanh MLP; gradients written by hand into .grad."""
    w1, b1, w2, b2 = (model[k].detach().numpy() for k in ("w1", "b1", "w2", "b2"))
    h = np.tanh(x @ w1.T + b1)
    error = h @ w2.T + b2 - y
    d_out = 2 * error / error.size
    d_h = (d_out @ w2) * (1 - h * h)
    grads = {"w1": d_h.T @ x, "b1": d_h.sum(0), "w2": d_out.T @ h, "b2": d_out.sum(0)}
    for name, grad in grads.items():
        model[name].grad = Tensor(grad.astype(np.float32))
    return float((error ** 2).mean())


CONFIGS = {
    "sgd-nesterov-steplr": (
        lambda ps: optim.SGD(ps, lr=0.2, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    "adam-warmup-cosine": (
        lambda ps: optim.Adam(ps, lr=0.05),
        lambda o: lr_scheduler.SequentialLR(
            o, [lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=2),
                lr_scheduler.CosineAnnealingLR(o, T_max=EPOCHS - 2)], milestones=[2])),
    "adamw-amsgrad-lambda": (
        lambda ps: optim.AdamW([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.01}],
                               lr=0.03, amsgrad=True),
        lambda o: lr_scheduler.LambdaLR(o, lambda epoch: 0.8 ** epoch)),
}


def train(model, optimizer, scheduler, rng, epochs):
    """Train for `epochs` epochs; the batches come from `rng`, as a shuffling loader's would."""
    losses = []
    for _ in range(epochs):
        for _ in range(STEPS_PER_EPOCH):
            x = rng.standard_normal((5, SIZES[0])).astype(np.float32)
            y = np.sin(x[:, :SIZES[2]])
            optimizer.zero_grad()
            losses.append(loss_and_grads(model, x, y))
            optimizer.step()
        scheduler.step()
    return losses


def fresh_run(config, seed):
    make_optimizer, make_scheduler = CONFIGS[config]
    model = make_model(seed)
    optimizer = make_optimizer(list(model.values()))
    return model, optimizer, make_scheduler(optimizer), np.random.default_rng(seed)


@pytest.mark.parametrize("config", CONFIGS)
def test_resumed_run_ends_with_the_same_weights_as_an_uninterrupted_one(config, tmp_path):
    model, optimizer, scheduler, rng = fresh_run(config, seed=0)
    straight_losses = train(model, optimizer, scheduler, rng, EPOCHS)
    straight = {name: p.detach().numpy().copy() for name, p in model.items()}

    model, optimizer, scheduler, rng = fresh_run(config, seed=0)
    losses = train(model, optimizer, scheduler, rng, STOP_AFTER)
    save({"epoch": STOP_AFTER, "model": model, "optim": optimizer.state_dict(),
          "sched": scheduler.state_dict(), "rng": rng.bit_generator.state},
         tmp_path / "checkpoint")
    del model, optimizer, scheduler, rng

    # A new process would start from other random weights; the checkpoint must win.
    model, optimizer, scheduler, rng = fresh_run(config, seed=123)
    checkpoint = load(tmp_path / "checkpoint")
    for name, param in model.items():
        param.data[...] = checkpoint["model"][name].data
    optimizer.load_state_dict(checkpoint["optim"])
    scheduler.load_state_dict(checkpoint["sched"])
    rng.bit_generator.state = checkpoint["rng"]
    losses += train(model, optimizer, scheduler, rng, EPOCHS - checkpoint["epoch"])

    assert losses == straight_losses
    for name, param in model.items():
        assert param.dtype == np.float32
        np.testing.assert_array_equal(param.data, straight[name])
    assert straight_losses[-1] < straight_losses[0]  # it did train
