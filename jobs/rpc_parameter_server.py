"""Parameter-server training over mpigrad's RPC (PyTorch's parameter-server tutorial, with
mpigrad's names): rank 0 holds the model, every other rank is a trainer.

    mpiexec -n 3 python jobs/rpc_parameter_server.py              # one server, two trainers
    mpiexec -n 5 python jobs/rpc_parameter_server.py --epochs 5
    sbatch jobs/rpc_parameter_server.sbatch                        # on a Slurm cluster

Each trainer takes its shard of a synthetic image set and, per batch, inside a distributed
autograd context: runs the forward on the server (`rref.rpc_sync().forward(x)`), computes
the loss locally, runs `dist_autograd.backward` (which reaches the server's parameters), and
steps its DistributedOptimizer, which updates the parameters on the server. Trainers run at
the same time, so the server's parameters change under them, as in the PyTorch tutorial.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed.autograd as dist_autograd  # noqa: E402
import mpigrad.distributed.rpc as rpc  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import data, nn, optim  # noqa: E402
from mpigrad.distributed.optim import DistributedOptimizer  # noqa: E402

from common import parameter_server_arguments, run_server_and_trainers  # noqa: E402


class ParameterServer:
    """Lives on rank 0; trainers reach it through an RRef."""

    def __init__(self, in_features, hidden, classes, seed):
        mg.manual_seed(seed)
        self.layers = [nn.Linear(in_features, hidden), nn.Linear(hidden, classes)]

    def forward(self, x):
        # Each trainer's forward works on a snapshot of the weights (a differentiable
        # clone): another trainer's optimizer step may change the parameters in place
        # before this trainer's backward, which needs the values its forward saw.
        h = x.flatten(1)
        for i, layer in enumerate(self.layers):
            if i:
                h = F.relu(h)
            h = F.linear(h, layer.weight.clone(), layer.bias.clone())
        return h

    def parameter_rrefs(self):
        return [rpc.RRef(p) for layer in self.layers for p in layer.parameters()]

    def accuracy(self, x, y):
        with mg.no_grad():
            return float((self.forward(x).argmax(1) == y).float().mean().item())


_server = None
_server_lock = threading.Lock()


def get_parameter_server(in_features, hidden, classes, seed):
    """Runs on rank 0: the one ParameterServer, made by the first trainer that asks."""
    global _server
    with _server_lock:
        if _server is None:
            _server = rpc.RRef(ParameterServer(in_features, hidden, classes, seed))
        return _server


class TrainerNet(nn.Module):
    def __init__(self, server):
        super().__init__()
        self.server = server

    def forward(self, x):
        return self.server.rpc_sync().forward(x)


def train(args, rank, size):
    train_set = data.SyntheticImages(args.train_samples, seed=args.seed, train=True)
    images, labels = train_set.tensors
    in_features = int(np.prod(images.shape[1:]))
    server = rpc.rpc_sync("ps", get_parameter_server,
                          args=(in_features, args.hidden, train_set.num_classes, args.seed))
    net = TrainerNet(server)
    optimizer = DistributedOptimizer(optim.SGD, server.rpc_sync().parameter_rrefs(),
                                     lr=args.lr, momentum=0.9)
    trainer, trainers = rank - 1, size - 1
    shard = np.arange(trainer, len(labels), trainers)
    rng = np.random.default_rng([args.seed, rank])
    for epoch in range(args.epochs):
        start, losses = time.perf_counter(), []
        order = rng.permutation(shard)
        for first in range(0, len(order), args.batch_size):
            batch = order[first:first + args.batch_size]
            x, y = mg.from_numpy(images.numpy()[batch]), mg.from_numpy(labels.numpy()[batch])
            with dist_autograd.context() as context_id:
                loss = F.cross_entropy(net(x), y)
                dist_autograd.backward(context_id, [loss])
                optimizer.step(context_id)
            losses.append(loss.item())
        # One write per line: trainers share mpiexec's stdout, and print's separate write of
        # the newline let another trainer's line land in between.
        print(f"trainer {trainer} epoch {epoch + 1}: loss {np.mean(losses):.4f} "
              f"({time.perf_counter() - start:.1f} s)\n", end="", flush=True)
    if trainer == 0:
        test_set = data.SyntheticImages(2000, seed=args.seed, train=False)
        accuracy = server.rpc_sync().accuracy(*test_set.tensors)
        print(f"test accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    run_server_and_trainers("rpc_parameter_server.py", train,
                            parameter_server_arguments(__doc__).parse_args())
