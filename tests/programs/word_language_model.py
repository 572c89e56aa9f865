"""A word-level LSTM language model trained the way the classic example scripts train it:
a Dictionary/Corpus over a text, batchify and get_batch, the hidden state detached between
batches (repackage_hidden), clip_grad_norm_, SGD by hand through `p.data`, the learning rate
annealed on the validation loss, and the best model saved whole with torch.save(model, f)
and loaded back for the test evaluation."""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = """the cat sat on the mat and the dog sat on the log
a bird flew over the house and the cat watched the bird
the dog ran after the cat and the bird sang on the roof
when the sun set the house was quiet and the mat was warm
the log lay by the river where the bird drank and the dog slept"""


class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    """Every line is a sentence ending in <eos>; the lines are split 3:1:1."""

    def __init__(self, text):
        self.dictionary = Dictionary()
        lines = text.splitlines()
        self.train = self.tokenize(lines[:3])
        self.valid = self.tokenize(lines[3:4])
        self.test = self.tokenize(lines[4:])

    def tokenize(self, lines):
        ids = []
        for line in lines:
            words = line.split() + ["<eos>"]
            ids.append(torch.tensor([self.dictionary.add_word(w) for w in words],
                                    dtype=torch.int64))
        return torch.cat(ids)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    """Cut the graph at the batch boundary."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--bptt", type=int, default=6)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--init", required=True)
    parser.add_argument("--save", required=True)
    args = parser.parse_args()

    corpus = Corpus(TEXT)
    train_data = batchify(corpus.train, 4)
    val_data = batchify(corpus.valid, 2)
    test_data = batchify(corpus.test, 2)
    ntokens = len(corpus.dictionary)
    model = RNNModel(ntokens, 16, 16, 2, tie_weights=args.tied)
    if os.path.exists(args.init):
        model.load_state_dict(torch.load(args.init))
    else:
        torch.save(model.state_dict(), args.init)
    criterion = nn.NLLLoss()

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(data_source.size(1))
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args.bptt)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    lr = args.lr
    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden = model.init_hidden(train_data.size(1))
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            print(f"epoch {epoch} batch {batch} lr {lr:.2f} loss {loss.item():.15e} "
                  f"ppl {math.exp(loss.item()):.15e}")
        val_loss = evaluate(val_data)
        print(f"end of epoch {epoch} valid loss {val_loss:.15e}")
        if not best_val_loss or val_loss < best_val_loss:
            with open(args.save, "wb") as f:
                torch.save(model, f)
            best_val_loss = val_loss
        else:
            lr /= 4.0

    with open(args.save, "rb") as f:
        model = torch.load(f, weights_only=False)
        model.rnn.flatten_parameters()
    print(f"end of training test loss {evaluate(test_data):.15e}")


if __name__ == "__main__":
    main()
