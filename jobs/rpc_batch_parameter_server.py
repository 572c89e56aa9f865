"""A parameter server that batches its trainers' updates with `rpc.functions.async_execution`
(PyTorch's "batch RPC processing" tutorial, with mpigrad's names): rank 0 holds the model,
every other rank is a trainer.

    mpiexec -n 3 python jobs/rpc_batch_parameter_server.py        # one server, two trainers
    mpiexec -n 5 python jobs/rpc_batch_parameter_server.py --epochs 5

Each trainer computes gradients on its own batch with the model it last received, then calls
`update_and_fetch_model` on the server. That function is asynchronous: it adds the gradients,
and returns a Future that completes only when every trainer's gradients of the round have
arrived and the server has taken one SGD step with their average. So the trainers move in
lockstep, as synchronous data parallelism would, while no server thread sits waiting for the
slowest trainer.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed.rpc as rpc  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import data, nn, optim  # noqa: E402

from common import parameter_server_arguments, run_server_and_trainers  # noqa: E402


def make_model(in_features, hidden, classes, seed):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


class BatchUpdateParameterServer:
    """Lives on rank 0; trainers reach it through an RRef."""

    def __init__(self, model, trainers, lr):
        self.model, self.trainers = model, trainers
        self.lock = threading.Lock()
        self.arrived = 0
        self.future_model = rpc.Future()
        self.optimizer = optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        for p in self.model.parameters():
            p.grad = mg.zeros_like(p)

    def get_model(self):
        return self.model

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch_model(server_rref, grads):
        self = server_rref.local_value()
        with self.lock:
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            self.arrived += 1
            future = self.future_model
            if self.arrived == self.trainers:
                for p in self.model.parameters():
                    p.grad /= self.trainers
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=False)
                self.arrived = 0
                self.future_model = rpc.Future()
                future.set_result(self.model)
        return future


_server = None
_server_lock = threading.Lock()


def get_server(in_features, hidden, classes, trainers, args):
    """Runs on rank 0: the one server, made by the first trainer that asks."""
    global _server
    with _server_lock:
        if _server is None:
            model = make_model(in_features, hidden, classes, args.seed)
            _server = rpc.RRef(BatchUpdateParameterServer(model, trainers, args.lr))
        return _server


def train(args, rank, size):
    train_set = data.SyntheticImages(args.train_samples, seed=args.seed, train=True)
    images, labels = train_set.tensors
    in_features = int(np.prod(images.shape[1:]))
    trainer, trainers = rank - 1, size - 1
    server = rpc.rpc_sync("ps", get_server, args=(in_features, args.hidden,
                                                 train_set.num_classes, trainers, args))
    model = server.rpc_sync().get_model()
    shard = np.arange(trainer, len(labels), trainers)
    # Every trainer takes the same number of batches, so every round completes.
    batches = len(shard) // args.batch_size
    rng = np.random.default_rng([args.seed, rank])
    for epoch in range(args.epochs):
        start, losses = time.perf_counter(), []
        order = rng.permutation(shard)
        for b in range(batches):
            batch = order[b * args.batch_size:(b + 1) * args.batch_size]
            x, y = mg.from_numpy(images.numpy()[batch]), mg.from_numpy(labels.numpy()[batch])
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            grads = [p.grad for p in model.parameters()]
            model = rpc.rpc_sync("ps", BatchUpdateParameterServer.update_and_fetch_model,
                                 args=(server, grads))
            losses.append(loss.item())
        # One write per line: trainers share mpiexec's stdout, and print's separate write of
        # the newline let another trainer's line land in between.
        print(f"trainer {trainer} epoch {epoch + 1}: loss {np.mean(losses):.4f} "
              f"({time.perf_counter() - start:.1f} s)\n", end="", flush=True)
    if trainer == 0:
        test_set = data.SyntheticImages(2000, seed=args.seed, train=False)
        x, y = test_set.tensors
        with mg.no_grad():
            accuracy = float((model(x).argmax(1) == y).float().mean().item())
        print(f"test accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    run_server_and_trainers("rpc_batch_parameter_server.py", train,
                            parameter_server_arguments(__doc__).parse_args())
