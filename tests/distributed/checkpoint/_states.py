"""A small model trained with AdamW in one process (the oracle), and its state split into
padded flat shards the way FSDP splits parameters, for the DCP tests and their jobs."""
import math

import numpy as np

import mpigrad as mg
from mpigrad import nn
from mpigrad.distributed.checkpoint import FlatShard

# Sizes that no world size of 2 or 3 divides evenly (7 * 5 = 35, 5, 2 * 7 = 14, 2).
SIZES = (7, 5, 2)


def model(seed=0):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.Tanh(),
                         nn.Linear(SIZES[1], SIZES[2])).double()


def batch(step):
    rng = np.random.default_rng(step)
    return (mg.tensor(rng.standard_normal((6, SIZES[0]))),
            mg.tensor(rng.standard_normal((6, SIZES[-1]))))


def trained(steps):
    """The model and its AdamW after `steps` steps, all in this process."""
    net = model()
    optimizer = mg.optim.AdamW(net.parameters(), lr=0.05, weight_decay=0.1)
    for step in range(steps):
        train_step(net, optimizer, step)
    return net, optimizer


def train_step(net, optimizer, step):
    x, y = batch(step)
    optimizer.zero_grad()
    ((net(x) - y) ** 2).mean().backward()
    optimizer.step()


def flat_shard(array, rank, world):
    """Rank `rank`'s padded slice of `array` flattened: equal slices of ceil(numel / world)."""
    flat = np.asarray(array).reshape(-1)
    length = math.ceil(flat.size / world)
    local = np.zeros(length, dtype=flat.dtype)
    piece = flat[rank * length:(rank + 1) * length]
    local[:piece.size] = piece
    return FlatShard(mg.Tensor(local), array.shape, rank * length)


def sharded_state(net, optimizer, rank, world):
    """`{"model", "optim"}` with every tensor as this rank's FlatShard (zeros when `net` is
    fresh: a target to load into); the optimizer's numbers and groups as they are."""
    model_state = {name: flat_shard(t._array, rank, world) for name, t in
                   net.state_dict().items()}
    optim_state = optimizer.state_dict()
    state = {index: {key: flat_shard(value._array, rank, world)
                     if isinstance(value, mg.Tensor) else value
                     for key, value in values.items()}
             for index, values in optim_state["state"].items()}
    return {"model": model_state, "optim": {"state": state,
                                            "param_groups": optim_state["param_groups"]}}
