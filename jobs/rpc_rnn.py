"""A recurrent model split across workers over mpigrad's RPC (the shape of PyTorch's RNN
model-parallel tutorial): the embedding table and the decoder live on worker1, the
recurrent layer on worker2, and worker0 drives training.

    mpiexec -n 3 python jobs/rpc_rnn.py                 # driver, emb+decoder, recurrent layer
    mpiexec -n 2 python jobs/rpc_rnn.py                 # the recurrent layer on the driver

The task: sequences that count up modulo the vocabulary with a per-sequence step; predict
each next token. Every step runs the forward through both remote workers, a distributed
backward that reaches all three, and a DistributedOptimizer step on every owner.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed.autograd as dist_autograd  # noqa: E402
import mpigrad.distributed.rpc as rpc  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import nn, optim  # noqa: E402
from mpigrad.distributed.optim import DistributedOptimizer  # noqa: E402


class Remote(nn.Module):
    """A module that lives on one worker; others hold an RRef to it."""

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.parameters()]


class EmbeddingTable(Remote):
    def __init__(self, ntoken, ninp, seed):
        super().__init__()
        mg.manual_seed(seed)
        self.encoder = nn.Embedding(ntoken, ninp)

    def forward(self, tokens):
        return self.encoder(tokens)


class Decoder(Remote):
    def __init__(self, ntoken, nhid, seed):
        super().__init__()
        mg.manual_seed(seed + 1)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, hidden):
        return self.decoder(hidden)


class ElmanRNN(Remote):
    """h_t = tanh(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh) over (time, batch, features)."""

    def __init__(self, ninp, nhid, seed):
        super().__init__()
        mg.manual_seed(seed + 2)
        self.input = nn.Linear(ninp, nhid)
        self.hidden = nn.Linear(nhid, nhid)
        self.nhid = nhid

    def forward(self, x):
        h = mg.zeros(x.shape[1], self.nhid)
        outputs = []
        for x_t in x:
            h = mg.tanh(self.input(x_t) + self.hidden(h))
            outputs.append(h)
        return mg.stack(outputs)


class RNNModel(nn.Module):
    """The driver's view: three RRefs, one forward that calls them in turn."""

    def __init__(self, table_worker, rnn_worker, ntoken, ninp, nhid, seed):
        super().__init__()
        self.embedding = rpc.remote(table_worker, EmbeddingTable, args=(ntoken, ninp, seed))
        self.rnn = rpc.remote(rnn_worker, ElmanRNN, args=(ninp, nhid, seed))
        self.decoder = rpc.remote(table_worker, Decoder, args=(ntoken, nhid, seed))

    def forward(self, tokens):
        emb = self.embedding.rpc_sync().forward(tokens)
        out = self.rnn.rpc_sync().forward(emb)
        return self.decoder.rpc_sync().forward(out)

    def parameter_rrefs(self):
        return [r for part in (self.embedding, self.rnn, self.decoder)
                for r in part.rpc_sync().parameter_rrefs()]


def counting_sequences(rng, batch, length, ntoken):
    start = rng.integers(ntoken, size=batch)
    step = rng.integers(1, 4, size=batch)
    return (start[None, :] + step[None, :] * np.arange(length + 1)[:, None]) % ntoken


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=12)
    p.add_argument("--ntoken", type=int, default=16)
    p.add_argument("--ninp", type=int, default=16)
    p.add_argument("--nhid", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    if size < 2:
        raise SystemExit("rpc_rnn.py needs at least 2 ranks: mpiexec -n 3 python jobs/rpc_rnn.py")
    rpc.init_rpc(f"worker{rank}")
    if rank == 0:
        model = RNNModel("worker1", f"worker{2 % size}", args.ntoken, args.ninp, args.nhid,
                         args.seed)
        optimizer = DistributedOptimizer(optim.Adam, model.parameter_rrefs(), lr=args.lr)
        rng = np.random.default_rng(args.seed)
        start, losses = time.perf_counter(), []
        for step in range(1, args.steps + 1):
            sequence = counting_sequences(rng, args.batch_size, args.length, args.ntoken)
            tokens, targets = mg.from_numpy(sequence[:-1]), mg.from_numpy(sequence[1:])
            with dist_autograd.context() as context_id:
                logits = model(tokens)
                loss = F.cross_entropy(logits.reshape(-1, args.ntoken), targets.reshape(-1))
                dist_autograd.backward(context_id, [loss])
                optimizer.step(context_id)
            losses.append(loss.item())
            if step % 25 == 0 or step == 1:
                print(f"step {step}: loss {np.mean(losses[-25:]):.4f} "
                      f"({time.perf_counter() - start:.1f} s)", flush=True)
        print(f"first loss {losses[0]:.4f} final loss {np.mean(losses[-10:]):.4f}", flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    main()
