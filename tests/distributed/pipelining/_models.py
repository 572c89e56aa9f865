"""A chain of layers cut into pipeline stages, its batches, and the one-process oracle."""
import numpy as np

import mpigrad as mg
from mpigrad import nn
from mpigrad.distributed.pipelining import SplitPoint, pipeline

WIDTH = 5


def chain(num_stages, seed=0):
    """Two Linear+Tanh pairs per stage, then a last Linear; float64."""
    mg.manual_seed(seed)
    layers = []
    for _ in range(2 * num_stages):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 3)).double()


def split_spec(num_stages):
    """Stage k starts at layer 4k (each stage has two pairs; the last also the head)."""
    return {str(4 * k): SplitPoint.BEGINNING for k in range(1, num_stages)}


def cut(model, num_stages, x):
    return pipeline(model, (x[:1],), split_spec=split_spec(num_stages))


def batch(step, size=12):
    rng = np.random.default_rng(100 + step)
    return mg.tensor(rng.standard_normal((size, WIDTH))), mg.tensor(rng.standard_normal((size, 3)))


def mse(out, target):
    return ((out - target) ** 2).mean()


def optimizer_for(kind, params):
    if kind == "SGD":
        return mg.optim.SGD(params, lr=0.1, momentum=0.9)
    return mg.optim.AdamW(params, lr=0.01, weight_decay=0.1)
