"""pytorch/examples' word_language_model, RNNModel with tied weights, trained for two truncated
BPTT steps (hidden state detached between them, gradients clipped to norm 0.25, SGD), equals
torch's losses, gradients and weights in float64 (1e-9). The model and the loop are written
once, against a library argument, and run on mpigrad and on torch."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")

NTOKEN, NINP, NLAYERS, BPTT, BSZ, LR, CLIP = 50, 8, 2, 5, 3, 20.0, 0.25


def rnn_model(lib, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
    """RNNModel of pytorch/examples/word_language_model/model.py, on `lib`'s nn."""
    nn, F = lib.nn, lib.nn.functional

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            if rnn_type in ("LSTM", "GRU"):
                self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            else:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
                self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity,
                                  dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            if tie_weights:
                self.decoder.weight = self.encoder.weight
            nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            decoded = self.decoder(self.drop(output)).view(-1, ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if rnn_type == "LSTM":
                return (weight.new_zeros(nlayers, bsz, nhid), weight.new_zeros(nlayers, bsz, nhid))
            return weight.new_zeros(nlayers, bsz, nhid)

    return RNNModel()


def repackage_hidden(h):
    return h.detach() if not isinstance(h, tuple) else tuple(repackage_hidden(v) for v in h)


def train(lib, model, source):
    """main.py's train() for two batches: per step, (loss, {name: clipped gradient})."""
    criterion = lib.nn.NLLLoss()
    optimizer = lib.optim.SGD(model.parameters(), lr=LR)
    hidden = model.init_hidden(BSZ)
    steps = []
    for i in range(0, 2 * BPTT, BPTT):
        data, targets = source[i:i + BPTT], source[i + 1:i + 1 + BPTT].reshape(-1)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        steps.append((loss.item(), {name: p.grad.numpy().copy()
                                    for name, p in model.named_parameters()}))
        optimizer.step()
    return steps


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"])
def test_two_truncated_bptt_steps_equal_torch(rng, rnn_type):
    theirs = rnn_model(torch, rnn_type, NTOKEN, NINP, NINP, NLAYERS, dropout=0.0,
                       tie_weights=True).double()
    ours = rnn_model(mg, rnn_type, NTOKEN, NINP, NINP, NLAYERS, dropout=0.0, tie_weights=True)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert ours.decoder.weight is ours.encoder.weight
    # A batchified corpus (main.py's batchify): 2 * bptt + 1 steps of BSZ token columns.
    tokens = rng.integers(0, NTOKEN, (2 * BPTT + 1, BSZ))
    ours_steps = train(mg, ours, mg.tensor(tokens))
    theirs_steps = train(torch, theirs, torch.tensor(tokens))
    for (loss, grads), (expected_loss, expected_grads) in zip(ours_steps, theirs_steps):
        assert loss == pytest.approx(expected_loss, rel=1e-9, abs=1e-9)
        assert grads.keys() == expected_grads.keys()
        for name in grads:
            np.testing.assert_allclose(grads[name], expected_grads[name], rtol=1e-9, atol=1e-9,
                                       err_msg=name)
    # The clipping took effect in the second step (the first step's gradients are smaller than
    # 0.25 here), so a missed or wrong clip would show.
    norm = np.sqrt(sum((g * g).sum() for g in ours_steps[1][1].values()))
    assert norm == pytest.approx(CLIP, rel=1e-5)  # clip_grad_norm_ divides by norm + 1e-6
    expected_weights = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), expected_weights[name].detach().numpy(),
                                   rtol=1e-9, atol=1e-9, err_msg=name)
