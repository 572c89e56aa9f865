"""A GPT written the way nanoGPT writes it (weight tying, a registered tril mask, masked_fill,
ignore_index=-1), run on mpigrad and on torch from the same source: the same loss and every
gradient in float64, and the same parameters after several AdamW steps."""
import math

import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def gpt_classes(lib):
    """nanoGPT's model, written once against `lib` (torch or mpigrad)."""
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embd, n_head, block_size):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.n_head, self.n_embd = n_head, n_embd
            self.register_buffer("bias", lib.tril(lib.ones(block_size, block_size))
                                 .view(1, 1, block_size, block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, n_embd, n_head, block_size):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head, block_size)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP(n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd)))
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = lib.arange(0, t, dtype=lib.long)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)

    return GPT


def _pair():
    """The two models with torch's initial weights copied into mpigrad's."""
    torch.manual_seed(0)
    theirs = gpt_classes(torch)().double()
    ours = gpt_classes(mg)().to(mg.float64)
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _batch(seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, 11, (3, 8))
    targets = rng.integers(0, 11, (3, 8))
    targets[0, :3] = -1  # positions without a target, as nanoGPT marks them
    return idx, targets


def test_the_state_dicts_have_the_same_names_and_shapes():
    ours, theirs = _pair()
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    assert ours.lm_head.weight is ours.transformer.wte.weight


def test_loss_and_every_gradient_match_torch():
    ours, theirs = _pair()
    idx, targets = _batch(1)
    loss = ours(mg.tensor(idx), mg.tensor(targets))
    expected = theirs(torch.tensor(idx), torch.tensor(targets))
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-12)
    loss.backward()
    expected.backward()
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=name)


def test_several_adamw_steps_stay_equal_to_torch():
    ours, theirs = _pair()

    def groups(lib_model):
        params = list(lib_model.parameters())
        return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt_ours = mg.optim.AdamW(groups(ours), lr=1e-2, betas=(0.9, 0.95))
    opt_theirs = torch.optim.AdamW(groups(theirs), lr=1e-2, betas=(0.9, 0.95))
    for step in range(4):
        idx, targets = _batch(10 + step)
        for model, opt, lib in ((ours, opt_ours, mg), (theirs, opt_theirs, torch)):
            opt.zero_grad()
            model(lib.tensor(idx), lib.tensor(targets)).backward()
            lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    expected = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), expected[name].detach().numpy(),
                                   rtol=1e-9, atol=1e-12, err_msg=name)
