"""An LSTM language model split across workers over mpigrad's RPC, in the shape of PyTorch's
distributed RPC tutorial: the embedding table and the decoder live on the parameter server
(worker1) as modules held through RRefs, the `nn.LSTM` on each trainer, and every trainer
trains its model with distributed autograd and a `DistributedOptimizer` over RRefs of all
its parameters.

    mpiexec -n 2 python jobs/rpc_rnn.py                 # trainer worker0, server worker1
    mpiexec -n 3 python jobs/rpc_rnn.py --check         # two trainers; compare with one process

Every rank but 1 is a trainer with a model of its own (its own embedding table and decoder on
the server) and its own batches. The task: sequences that count up modulo the vocabulary with
a per-sequence step; predict each next token. As in the tutorial, the LSTM's hidden state
carries from batch to batch, detached. With `--check` each trainer then trains the same
model (same weights, same batches) in one process with plain autograd and the same optimizer,
and prints the largest difference in loss and in final parameters between the two runs.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed.autograd as dist_autograd  # noqa: E402
import mpigrad.distributed.rpc as rpc  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import nn, optim  # noqa: E402
from mpigrad.distributed.optim import DistributedOptimizer  # noqa: E402

SERVER = "worker1"


def parameter_rrefs(module):
    return [rpc.RRef(p) for p in module.parameters()]


class EmbeddingTable(nn.Module):
    def __init__(self, ntoken, ninp, dropout, seed):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        # A generator of its own: the server builds several trainers' tables at once on its
        # request threads, which would interleave their draws from the global one.
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1,
                         generator=mg.Generator().manual_seed(seed))

    def forward(self, tokens):
        return self.drop(self.encoder(tokens))


class Decoder(nn.Module):
    def __init__(self, ntoken, nhid, dropout, seed):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1,
                         generator=mg.Generator().manual_seed(seed + 1))
        nn.init.zeros_(self.decoder.bias)

    def forward(self, output):
        return self.decoder(self.drop(output))


def owned_parameter_rrefs(module_rref):
    """On the module's owner: RRefs of its parameters."""
    return parameter_rrefs(module_rref.local_value())


def run_part(part, x):
    """The forward of a part of the model where it lives: on its owner through an RRef, or
    here."""
    return part.rpc_sync().forward(x) if isinstance(part, rpc.RRef) else part(x)


class RNNModel(nn.Module):
    """Embedding, LSTM and decoder; `server` names the worker that holds the embedding and
    decoder, or is None to hold them here (the one-process reference)."""

    def __init__(self, server, ntoken, ninp, nhid, nlayers, dropout, seed):
        super().__init__()
        parts = ((EmbeddingTable, (ntoken, ninp, dropout, seed)),
                 (Decoder, (ntoken, nhid, dropout, seed)))
        if server is None:
            self.embedding, self.decoder = (cls(*args) for cls, args in parts)
        else:
            self.embedding, self.decoder = (rpc.remote(server, cls, args=args)
                                            for cls, args in parts)
        mg.manual_seed(seed + 2)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)

    def forward(self, tokens, hidden):
        output, hidden = self.rnn(run_part(self.embedding, tokens), hidden)
        return run_part(self.decoder, output), hidden

    def parameter_rrefs(self):
        """RRefs of every parameter: embedding, LSTM, decoder."""
        embedding, decoder = (rpc.rpc_sync(part.owner(), owned_parameter_rrefs, args=(part,))
                              for part in (self.embedding, self.decoder))
        return embedding + parameter_rrefs(self.rnn) + decoder

    def ordered_parameters(self):
        """The one-process model's parameters in parameter_rrefs()'s order."""
        return [p for part in (self.embedding, self.rnn, self.decoder)
                for p in part.parameters()]


def counting_sequences(rng, batch, length, ntoken):
    start = rng.integers(ntoken, size=batch)
    step = rng.integers(1, 4, size=batch)
    return (start[None, :] + step[None, :] * np.arange(length + 1)[:, None]) % ntoken


def batches(args, rank):
    """(tokens, targets) of every step of trainer `rank`, the same on every call."""
    rng = np.random.default_rng([args.seed, rank])
    for _ in range(args.steps):
        sequence = counting_sequences(rng, args.batch_size, args.length, args.ntoken)
        yield mg.from_numpy(sequence[:-1]), mg.from_numpy(sequence[1:].reshape(-1))


def train(model, args, rank, context, update):
    """The training loop, shared by the distributed run and the one-process reference: each
    step's forward and `update(context_id, loss)` (the backward and the optimizer step) run
    inside `context()`. The losses of every step."""
    zeros = mg.zeros(args.nlayers, args.batch_size, args.nhid)
    hidden, losses = (zeros, zeros.clone()), []
    for tokens, targets in batches(args, rank):
        hidden = tuple(h.detach() for h in hidden)
        with context() as context_id:
            logits, hidden = model(tokens, hidden)
            loss = F.cross_entropy(logits.reshape(-1, args.ntoken), targets)
            update(context_id, loss)
        losses.append(loss.item())
    return losses


def run_trainer(args, rank):
    model = RNNModel(SERVER, args.ntoken, args.ninp, args.nhid, args.nlayers, args.dropout,
                     args.seed)
    rrefs = model.parameter_rrefs()
    optimizer = DistributedOptimizer(optim.Adam, rrefs, lr=args.lr)

    def distributed_update(context_id, loss):
        dist_autograd.backward(context_id, [loss])
        optimizer.step(context_id)

    start = time.perf_counter()
    losses = train(model, args, rank, dist_autograd.context, distributed_update)
    print(f"trainer {rank}: {args.steps} steps in {time.perf_counter() - start:.1f} s, first "
          f"loss {losses[0]:.4f} final loss {np.mean(losses[-10:]):.4f}", flush=True)
    if not args.check:
        return
    reference = RNNModel(None, args.ntoken, args.ninp, args.nhid, args.nlayers, args.dropout,
                         args.seed)
    local_optimizer = optim.Adam(reference.ordered_parameters(), lr=args.lr)

    def local_update(_, loss):
        local_optimizer.zero_grad()
        loss.backward()
        local_optimizer.step()

    expected = train(reference, args, rank, contextlib.nullcontext, local_update)
    final = [r.to_here() for r in rrefs]
    loss_gap = max(abs(a - b) for a, b in zip(losses, expected))
    weight_gap = max(float((a - b).abs().max())
                     for a, b in zip(final, reference.ordered_parameters()))
    print(f"trainer {rank}: against one process, largest loss difference {loss_gap:.3g}, "
          f"largest parameter difference {weight_gap:.3g}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=12, help="time steps per batch")
    p.add_argument("--ntoken", type=int, default=16)
    p.add_argument("--ninp", type=int, default=16)
    p.add_argument("--nhid", type=int, default=32)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.0,
                   help="dropout after the embedding, between LSTM layers and before the "
                        "decoder (default 0)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam's lr (default 0.01)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true",
                   help="then train the same model in one process and print the differences")
    args = p.parse_args()
    if args.check and args.dropout:
        p.error("--check needs --dropout 0: the server's and the trainer's dropout masks "
                "come from two generators, one process's from one")
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    if size < 2:
        raise SystemExit("rpc_rnn.py needs at least 2 ranks: mpiexec -n 2 python jobs/rpc_rnn.py")
    if args.dtype == "float64":
        mg.set_default_dtype(mg.float64)
    rpc.init_rpc(f"worker{rank}")
    if f"worker{rank}" != SERVER:
        run_trainer(args, rank)
    rpc.shutdown()


if __name__ == "__main__":
    main()
