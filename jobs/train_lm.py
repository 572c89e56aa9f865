"""A word-level language model trained with DistributedDataParallel, written the way
pytorch/examples' word_language_model writes it: an embedding, a 2-layer LSTM or GRU, dropout,
a decoder optionally tied to the embedding, truncated backpropagation through time with the
hidden state detached between chunks, gradient clipping, plain SGD whose learning rate is
divided by 4 whenever the validation loss stops improving.

    mpiexec -n 2 python jobs/train_lm.py                    # Python's own sources, ~1 min
    mpiexec -n 4 python jobs/train_lm.py --model GRU --tied --epochs 6 --max-words 1000000
    srun --mpi=pmi2 python jobs/train_lm.py --text corpus.txt

The text is the Python standard library's source files of the running interpreter (real
text, on every machine, offline), or `--text FILE`, cut into words and punctuation marks with
`<eos>` closing every line; the first 90% of the tokens train, the rest validate. The
vocabulary is the training part's `--vocab` most frequent tokens, plus `<unk>` for the others
and `<eos>`.

As batchify does, the token stream is laid out as `--batch-size` columns read top to bottom.
Each of N ranks takes its own contiguous slice of batch-size / N columns and keeps its own
hidden state for them, so with `--dropout 0` N ranks train exactly as one process (DDP
averages the ranks' equal-sized means; every rank clips the same averaged gradients). Rank 0
prints the training and validation perplexity of every epoch, both over all ranks' tokens.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import nn, optim  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel  # noqa: E402
from mpigrad.nn.utils import clip_grad_norm_  # noqa: E402

from common import (add_text_job_arguments, finish, log, mean_over_ranks,  # noqa: E402
                    positive_float, positive_int, text_files, use_dtype)

TOKEN = re.compile(r"\w+|[^\w\s]")
EOS, UNK = "<eos>", "<unk>"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Word-level LSTM/GRU language model with DDP "
                                            "(launch with mpiexec or srun).")
    p.add_argument("--max-words", type=positive_int, default=300_000,
                   help="tokens of text to read (default 300,000)")
    p.add_argument("--vocab", type=positive_int, default=2000,
                   help="most frequent training tokens kept; the rest become <unk> "
                        "(default 2000)")
    p.add_argument("--model", choices=["LSTM", "GRU"], default="LSTM",
                   help="recurrent layer (default LSTM)")
    p.add_argument("--emsize", type=positive_int, default=128,
                   help="embedding size (default 128)")
    p.add_argument("--nhid", type=positive_int, default=128,
                   help="hidden units per layer (default 128)")
    p.add_argument("--nlayers", type=positive_int, default=2, help="layers (default 2)")
    p.add_argument("--dropout", type=float, default=0.2,
                   help="dropout on the embedding, between layers and before the decoder "
                        "(default 0.2)")
    p.add_argument("--tied", action="store_true",
                   help="the decoder's weight is the embedding's (needs --emsize == --nhid)")
    p.add_argument("--batch-size", type=positive_int, default=20,
                   help="token columns over all ranks, a multiple of the rank count "
                        "(default 20)")
    p.add_argument("--bptt", type=positive_int, default=35,
                   help="time steps per truncated backpropagation chunk (default 35)")
    p.add_argument("--epochs", type=positive_int, default=2, help="epochs (default 2)")
    p.add_argument("--lr", type=positive_float, default=20.0,
                   help="initial SGD learning rate (default 20)")
    p.add_argument("--clip", type=positive_float, default=0.25,
                   help="gradient norm clip (default 0.25)")
    add_text_job_arguments(p, seeds="weights and dropout")
    p.add_argument("--save", metavar="FILE", default=None,
                   help="rank 0 saves the final state dict here (.npz or .safetensors)")
    args = p.parse_args(argv)
    if not 0 <= args.dropout < 1:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.tied and args.emsize != args.nhid:
        p.error(f"--tied needs --emsize equal to --nhid, got {args.emsize} and {args.nhid}")
    return args


def read_tokens(args):
    """Words and punctuation of --text, or of the standard library's .py files in name
    order, with <eos> after every line; at most --max-words of them."""
    tokens = []
    for path in text_files(args):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                tokens += TOKEN.findall(line)
                tokens.append(EOS)
                if len(tokens) >= args.max_words:
                    return tokens[:args.max_words]
    return tokens


class Corpus:
    """Token ids of the training and validation parts, and the vocabulary both ways."""

    def __init__(self, tokens, vocab):
        cut = int(len(tokens) * 0.9)
        counts = collections.Counter(t for t in tokens[:cut] if t != EOS)
        self.words = [EOS, UNK] + [w for w, _ in counts.most_common(vocab)]
        index = {w: i for i, w in enumerate(self.words)}
        ids = np.array([index.get(t, 1) for t in tokens], dtype=np.int64)
        self.train, self.valid = ids[:cut], ids[cut:]


def batchify(ids, batch_size, rank, world):
    """The stream as batch_size columns (batchify's layout, the ragged tail dropped), and
    this rank's contiguous slice of them."""
    rows = len(ids) // batch_size
    columns = ids[:rows * batch_size].reshape(batch_size, rows).T
    per_rank = batch_size // world
    return np.ascontiguousarray(columns[:, rank * per_rank:(rank + 1) * per_rank])


class RNNModel(nn.Module):
    """Encoder, recurrent stack and decoder, as pytorch/examples' RNNModel."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout, tie_weights):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, tokens, hidden):
        output, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        decoded = self.decoder(self.drop(output))
        return F.log_softmax(decoded.view(-1, decoded.shape[-1]), dim=1), hidden

    def init_hidden(self, batch_size):
        weight = next(self.parameters())
        zeros = weight.new_zeros(self.nlayers, batch_size, self.nhid)
        return (zeros, zeros.clone()) if self.rnn_type == "LSTM" else zeros


def repackage_hidden(hidden):
    """Cut the graph at the chunk boundary: the state carries on, its history does not."""
    if isinstance(hidden, tuple):
        return tuple(h.detach() for h in hidden)
    return hidden.detach()


def chunks(data, bptt):
    """(inputs, flattened next-token targets) of every truncated-BPTT chunk of `data`."""
    for i in range(0, len(data) - 1, bptt):
        length = min(bptt, len(data) - 1 - i)
        yield mg.from_numpy(data[i:i + length]), mg.from_numpy(data[i + 1:i + 1 + length]
                                                                .reshape(-1))


def train_epoch(ddp, model, optimizer, data, args):
    ddp.train()
    hidden = model.init_hidden(data.shape[1])
    total, count = 0.0, 0
    for inputs, targets in chunks(data, args.bptt):
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = ddp(inputs, hidden)
        loss = F.nll_loss(output, targets)
        loss.backward()
        clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        total += loss.item() * len(targets)
        count += len(targets)
    return mean_over_ranks(total, count)


def evaluate(model, data, args):
    model.eval()
    hidden = model.init_hidden(data.shape[1])
    total, count = 0.0, 0
    with mg.no_grad():
        for inputs, targets in chunks(data, args.bptt):
            output, hidden = model(inputs, hidden)
            total += F.nll_loss(output, targets).item() * len(targets)
            count += len(targets)
    return mean_over_ranks(total, count)


def train(args):
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        log(rank, f"error: --batch-size {args.batch_size} is not a multiple of the {world} "
                  "ranks")
        return 2
    corpus = Corpus(read_tokens(args), args.vocab)
    train_data = batchify(corpus.train, args.batch_size, rank, world)
    valid_data = batchify(corpus.valid, args.batch_size, rank, world)
    if len(valid_data) < 2:  # then training, 9 times longer, has at least 18 rows
        log(rank, f"error: {len(corpus.valid)} validation tokens are too few for "
                  f"--batch-size {args.batch_size}; read more text (--max-words)")
        return 2
    use_dtype(args)
    mg.manual_seed(args.seed)
    model = RNNModel(args.model, len(corpus.words), args.emsize, args.nhid, args.nlayers,
                     args.dropout, args.tied)
    # Each rank drops out its own units: the same stream everywhere would repeat one mask
    # pattern across the ranks' columns.
    mg.manual_seed(args.seed + rank)
    ddp = DistributedDataParallel(model)
    optimizer = optim.SGD(model.parameters(), lr=args.lr)
    params = sum(p.numel() for p in model.parameters())
    log(rank, f"{args.model} language model of {params} parameters, vocabulary "
              f"{len(corpus.words)}, {len(corpus.train)} training and {len(corpus.valid)} "
              f"validation tokens, {world} ranks x {args.batch_size // world} columns, "
              f"bptt {args.bptt}")
    best = math.inf
    for epoch in range(1, args.epochs + 1):
        started = time.perf_counter()
        train_loss = train_epoch(ddp, model, optimizer, train_data, args)
        valid_loss = evaluate(model, valid_data, args)
        elapsed = time.perf_counter() - started
        lr = optimizer.param_groups[0]["lr"]
        log(rank, f"epoch {epoch} | lr {lr:.4g} | train ppl {math.exp(train_loss):.2f} | "
                  f"valid ppl {math.exp(valid_loss):.2f} | {elapsed:.1f} s, "
                  f"{len(corpus.train) / elapsed:.0f} tokens/s")
        if valid_loss < best:
            best = valid_loss
        else:
            for group in optimizer.param_groups:
                group["lr"] /= 4.0
    if rank == 0 and args.save:
        mg.save(model.state_dict(), args.save)
    return finish(rank, f"best valid ppl {math.exp(best):.2f}")


if __name__ == "__main__":
    sys.exit(train(parse_args()))
