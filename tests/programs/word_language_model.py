"""A word-level language model trained the way the classic example scripts train one: a
Dictionary/Corpus over a text, batchify and get_batch, an LSTM (or, with --model Transformer,
an nn.Transformer subclass that uses its encoder under a causal mask), the hidden state
detached between batches (repackage_hidden), clip_grad_norm_, SGD by hand through `p.data`,
the learning rate annealed on the validation loss, and the best model saved whole with
torch.save(model, f) and loaded back for the test evaluation."""
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


class PositionalEncoding(nn.Module):
    """Sines and cosines of the position, added to the embeddings (a buffer, not learnt)."""

    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    """An nn.Transformer whose encoder alone is used, its decoder replaced by a Linear."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.0):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                         num_encoder_layers=nlayers, dropout=dropout)
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(device)
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


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
    parser.add_argument("--model", default="LSTM", choices=["LSTM", "Transformer"])
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--init", required=True)
    parser.add_argument("--save", required=True)
    args = parser.parse_args()

    corpus = Corpus(TEXT)
    train_data = batchify(corpus.train, 4)
    val_data = batchify(corpus.valid, 2)
    test_data = batchify(corpus.test, 2)
    ntokens = len(corpus.dictionary)
    if args.model == "Transformer":
        model = TransformerModel(ntokens, 16, 2, 32, 2)
    else:
        model = RNNModel(ntokens, 16, 16, 2, tie_weights=args.tied)
    print(model)
    if os.path.exists(args.init):
        model.load_state_dict(torch.load(args.init))
    else:
        torch.save(model.state_dict(), args.init)
    criterion = nn.NLLLoss()

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        if args.model != "Transformer":
            hidden = model.init_hidden(data_source.size(1))
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args.bptt)
                if args.model == "Transformer":
                    output = model(data).view(-1, ntokens)
                else:
                    output, hidden = model(data, hidden)
                    hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    lr = args.lr
    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        model.train()
        if args.model != "Transformer":
            hidden = model.init_hidden(train_data.size(1))
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            if args.model == "Transformer":
                output = model(data).view(-1, ntokens)
            else:
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
        if args.model in ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"]:
            model.rnn.flatten_parameters()
    print(f"end of training test loss {evaluate(test_data):.15e}")


if __name__ == "__main__":
    main()
