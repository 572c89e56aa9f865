"""Model parallelism over RPC in the shape of the classic distributed RNN example: a
parameter server ("ps") holds the embedding table and the decoder, built there with
rpc.remote; the trainer holds the LSTM, calls the remote parts through their RRefs
(rpc_sync on rref.owner(), rref.local_value() on the owner), collects every parameter as an
RRef, trains with dist_autograd and a DistributedOptimizer, then evaluates with calls in
flight at once (rpc_async, torch.futures.wait_all) and an RRef's rpc_sync() proxy. Token
batches are torch.LongTensor's of numpy draws, taken modulo the vocabulary; the workers are
started with mp.spawn and meet through MASTER_ADDR/MASTER_PORT. float64."""
import argparse
import os

import numpy as np
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.distributed.optim import DistributedOptimizer
from torch.distributed.rpc import RRef


def _call_method(method, rref, *args, **kwargs):
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    """Run `method` on the object `rref` refers to, where it lives."""
    args = [method, rref] + list(args)
    return rpc.rpc_sync(rref.owner(), _call_method, args=args, kwargs=kwargs)


def _parameter_rrefs(module):
    return [RRef(param) for param in module.parameters()]


def _load_or_save(module, path):
    """The torch run saves each part's own initial weights; the other runs load them."""
    if os.path.exists(path):
        module.load_state_dict(torch.load(path))
    else:
        torch.save(module.state_dict(), path)


class EmbeddingTable(nn.Module):
    def __init__(self, ntoken, ninp, init):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.encoder.weight.data.uniform_(-0.1, 0.1)
        _load_or_save(self, init)

    def forward(self, input):
        return self.encoder(input).cpu()


class Decoder(nn.Module):
    def __init__(self, ntoken, nhid, init):
        super().__init__()
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight.data.uniform_(-0.1, 0.1)
        self.decoder.bias.data.zero_()
        _load_or_save(self, init)

    def forward(self, output):
        return self.decoder(output)


class RNNModel(nn.Module):
    def __init__(self, ps, ntoken, ninp, nhid, nlayers, init):
        super().__init__()
        self.emb_table_rref = rpc.remote(ps, EmbeddingTable, args=(ntoken, ninp,
                                                                    init + ".embedding"))
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        _load_or_save(self.rnn, init + ".lstm")
        self.decoder_rref = rpc.remote(ps, Decoder, args=(ntoken, nhid, init + ".decoder"))

    def forward(self, input, hidden):
        emb = _remote_method(EmbeddingTable.forward, self.emb_table_rref, input)
        output, hidden = self.rnn(emb, hidden)
        decoded = _remote_method(Decoder.forward, self.decoder_rref, output)
        return decoded, hidden

    def parameter_rrefs(self):
        remote_params = []
        remote_params.extend(_remote_method(_parameter_rrefs, self.emb_table_rref))
        remote_params.extend(_parameter_rrefs(self.rnn))
        remote_params.extend(_remote_method(_parameter_rrefs, self.decoder_rref))
        return remote_params


def _run_trainer(args):
    seq_len, batch, ntoken, ninp, nhid, nlayers = 5, 3, 7, 4, 6, 2
    rng = np.random.default_rng(1)
    hidden = (torch.zeros(nlayers, batch, nhid), torch.zeros(nlayers, batch, nhid))
    model = RNNModel("ps", ntoken, ninp, nhid, nlayers, args.init)
    param_rrefs = model.parameter_rrefs()
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=0.5)
    criterion = torch.nn.CrossEntropyLoss()

    def get_next_batch():
        for _ in range(3):
            data = torch.LongTensor(rng.integers(0, 1000, (seq_len, batch)).tolist()) % ntoken
            target = (data + 1) % ntoken  # predict the next token id
            yield data, target

    for epoch in range(args.epochs):
        for data, target in get_next_batch():
            with dist_autograd.context() as context_id:
                hidden[0].detach_()
                hidden[1].detach_()
                output, hidden = model(data, hidden)
                loss = criterion(output.view(-1, ntoken), target.view(-1))
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
            print(f"Training epoch {epoch} loss {loss.item():.15e}", flush=True)
    remote_sum = sum(rref.to_here().abs().sum().item() for rref in param_rrefs)
    print(f"parameters after training, abs sum {remote_sum:.15e}", flush=True)

    # Evaluation: several lookups in flight at once, then one through the RRef's proxy.
    batches = [data for data, _ in get_next_batch()]
    futs = [rpc.rpc_async(model.emb_table_rref.owner(), _call_method,
                          args=(EmbeddingTable.forward, model.emb_table_rref, data))
            for data in batches]
    embs = torch.futures.wait_all(futs)
    with torch.no_grad():
        decoded = model.decoder_rref.rpc_sync().forward(embs[0].new_ones(2, nhid))
    print(f"evaluation: embeddings abs sum {sum(e.abs().sum().item() for e in embs):.15e}, "
          f"decoded {decoded.sum().item():.15e}", flush=True)


def run_worker(rank, world_size, args):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_default_dtype(torch.float64)
    if rank == 1:
        rpc.init_rpc("trainer", rank=rank, world_size=world_size)
        _run_trainer(args)
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size)
    rpc.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=29500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--init", required=True)
    args = parser.parse_args()
    world_size = 2
    mp.spawn(run_worker, args=(world_size, args), nprocs=world_size, join=True)
