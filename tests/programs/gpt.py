"""A small GPT trained the way the popular single-file GPT trainers train one: a GPTConfig
dataclass, weight tying, scaled init of the residual projections, AdamW with decay and
no-decay parameter groups, a warmup-then-cosine learning rate, gradient accumulation under
`torch.autocast` with a GradScaler (enabled for float16, as those trainers do), gradient
clipping after unscale_, periodic evaluation, a checkpoint dict (model, optimizer and scaler
state, model args, iteration, best validation loss, the run's config) written with
torch.save, and a sample generated at the end (topk, masking by comparison, multinomial).
`--init_from resume` rebuilds the model from the checkpoint's args and continues.

The text is a fixed string encoded by characters; batches are drawn with numpy from a seed
and the iteration number, so a resumed run draws what an uninterrupted one would."""
import argparse
import inspect
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
        "incredulity, it was the season of Light, it was the season of Darkness. ") * 3


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:  # inference: only the last position's logits are needed
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Extend each row of `idx` by sampling one token at a time."""
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size \
                else idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra_args = dict(fused=True) if fused_available and device_type == "cuda" else dict()
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--init", required=True, help="initial weights: read if present")
    parser.add_argument("--init_from", default="scratch", choices=["scratch", "resume"])
    parser.add_argument("--max_iters", type=int, default=4)
    parser.add_argument("--eval_interval", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16",
                                                                "float16"])
    parser.add_argument("--init_scale", type=float, default=2.0 ** 16)
    args = parser.parse_args()
    batch_size, gradient_accumulation_steps, eval_iters = 4, 2, 2
    learning_rate, min_lr, warmup_iters, lr_decay_iters = 3e-3, 3e-4, 2, 8
    weight_decay, beta1, beta2, grad_clip = 0.1, 0.9, 0.95, 1.0
    device, device_type = "cpu", "cpu"

    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
               "float16": torch.float16}[args.dtype]
    ctx = (nullcontext() if args.dtype == "float32"
           else torch.amp.autocast(device_type=device_type, dtype=ptdtype))

    chars = sorted(set(TEXT))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = np.array([stoi[c] for c in TEXT], dtype=np.uint16)
    n = int(0.8 * len(data))
    splits = {"train": data[:n], "val": data[n:]}

    def get_batch(split, iteration, k=0):
        """iteration None: the fixed evaluation batches."""
        source = splits[split]
        rng = np.random.default_rng([k, split == "val"] + ([] if iteration is None
                                                           else [iteration + 1]))
        ix = rng.integers(len(source) - model_args["block_size"], size=batch_size)
        block = model_args["block_size"]
        x = torch.stack([torch.from_numpy(source[i:i + block].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(source[i + 1:i + 1 + block].astype(np.int64))
                         for i in ix])
        return x.to(device), y.to(device)

    model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=True,
                      vocab_size=None, dropout=0.0)
    iter_num, best_val_loss = 0, 1e9
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    if args.init_from == "scratch":
        model_args["vocab_size"] = len(chars)
        model = GPT(GPTConfig(**model_args))
        if os.path.exists(args.init):
            model.load_state_dict(torch.load(args.init))
        else:
            torch.save(model.state_dict(), args.init)
    else:
        checkpoint = torch.load(ckpt_path, map_location=device)
        for k in ["n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"]:
            model_args[k] = checkpoint["model_args"][k]
        model = GPT(GPTConfig(**model_args))
        state_dict = checkpoint["model"]
        unwanted_prefix = "_orig_mod."
        for k in list(state_dict.keys()):
            if k.startswith(unwanted_prefix):
                state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
        model.load_state_dict(state_dict)
        iter_num = checkpoint["iter_num"]
        best_val_loss = checkpoint["best_val_loss"]
        print(f"resuming from iteration {iter_num} of a {checkpoint['config']['dtype']} run, "
              f"best val loss {best_val_loss:.15e}")
    print(model)
    print(f"number of parameters: {model.get_num_params()}")
    model.to(device)

    scaler = torch.amp.GradScaler(device_type, init_scale=args.init_scale,
                                  enabled=(args.dtype == "float16"))
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2),
                                           device_type)
    print(optimizer)
    if args.init_from == "resume":
        optimizer.load_state_dict(checkpoint["optimizer"])
        scaler.load_state_dict(checkpoint["scaler"])
    checkpoint = None

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split, None, k)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % args.eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.15e}, "
                  f"val loss {losses['val']:.15e}")
            if losses["val"] < best_val_loss and iter_num > 0:
                best_val_loss = losses["val"]
                checkpoint = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(),
                    "model_args": model_args,
                    "iter_num": iter_num,
                    "best_val_loss": best_val_loss,
                    "config": vars(args),
                }
                print(f"saving checkpoint to {args.out_dir}")
                torch.save(checkpoint, ckpt_path)
        if iter_num >= args.max_iters:
            break
        for micro_step in range(gradient_accumulation_steps):
            X, Y = get_batch("train", iter_num, micro_step)
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.15e}, lr {lr:.6e}, scale {scaler.get_scale()}")
        iter_num += 1

    # A sample, as the trainers' sample scripts take one. top_k=1 leaves one token with
    # non-zero probability, so every library's multinomial draws the same.
    model.eval()
    start = torch.tensor([[stoi[c] for c in "it was the "]], dtype=torch.long, device=device)
    with ctx:
        sample = model.generate(start, max_new_tokens=12, top_k=1)
    print("sample:", repr("".join(chars[i] for i in sample[0].tolist())))


if __name__ == "__main__":
    main()
