"""Training steps of the models of the day against PyTorch: a GPT, a ResNet and a word LSTM.

    python jobs/bench/bench_models.py [--steps 5] [--rounds 7] [--only gpt resnet lm]
                                      [--no-memory] [--no-breakdown]

gpt: nanoGPT's model with scaled_dot_product_attention (4 layers, 4 heads, n_embd 128, block
64, vocabulary 96, tied embedding), batch 16; a step is zero_grad, forward, cross-entropy,
backward, clip_grad_norm_(1.0) and AdamW (no decay on biases and norms).
resnet: a torchvision-style ResNet of BasicBlocks (a 3x3 stem of 16 channels, two blocks of
16 and two of 32 channels, the first of them strided with a 1x1 projection, BatchNorm2d,
AdaptiveAvgPool2d, a linear classifier) on 3x32x32 images, batch 32; SGD with momentum.
lm: pytorch/examples' word-language model (embedding 200, a 2-layer LSTM of 200 units, a
linear decoder, vocabulary 1000; no dropout, so both libraries compute the same step) on one
truncated-BPTT chunk of 35 time steps x 20 columns, from a zero state; SGD (lr 20) after
clip_grad_norm_(0.25).
All in float32, one thread, both libraries from the same weights and data.

The libraries run interleaved, round after round, and the ratio reported is the median of the
rounds' own ratios mpigrad / torch (with quartiles), in the running thread's CPU time, as in
bench_engine.py. Peak memory: each library's step runs in a child process of its own, and
the growth of its peak resident set from just before the first step to after the last (the
activations, gradients, optimizer state and scratch of a step) is compared. Then one
instrumented step splits mpigrad's time by category (bench_engine.py's categories).
"""
from harness import breakdown, print_breakdown, time_call  # first: one BLAS thread per process

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402

VOCAB, BLOCK = 96, 64
LM_VOCAB, LM_BPTT, LM_BATCH = 1000, 35, 20


def gpt(lib, n_layer=4, n_head=4, n_embd=128):
    """nanoGPT's model (its fast path: scaled_dot_product_attention), written against `lib`."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                     nn.Linear(4 * n_embd, n_embd))

        def attention(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

        def forward(self, x):
            x = x + self.attention(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, n_embd), nn.Embedding(BLOCK, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
            self.wte.weight = self.lm_head.weight

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(lib.arange(idx.shape[1]))
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


def resnet(lib, widths=(16, 32), classes=10):
    """A torchvision-style ResNet of BasicBlocks, written against `lib`."""
    nn, F = lib.nn, lib.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (x if self.downsample is None else self.downsample(x)))

    layers = [nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
              nn.ReLU()]
    cin = widths[0]
    for i, width in enumerate(widths):
        layers += [BasicBlock(cin, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)]
        cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def word_lm(lib, ninp=200, nhid=200, nlayers=2):
    """pytorch/examples' RNNModel (LSTM, untied), written against `lib`; the step's chunk
    starts from a zero state (hidden=None)."""
    nn = lib.nn

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(LM_VOCAB, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers)
            self.decoder = nn.Linear(nhid, LM_VOCAB)

        def forward(self, tokens):
            output, _ = self.rnn(self.encoder(tokens))
            return self.decoder(output)

    return RNNModel()


def gpt_batch(rng):
    return rng.integers(0, VOCAB, (16, BLOCK)), rng.integers(0, VOCAB, (16, BLOCK))


def resnet_batch(rng):
    return (rng.standard_normal((32, 3, 32, 32)).astype(np.float32),
            rng.integers(0, 10, 32))


def lm_batch(rng):
    return (rng.integers(0, LM_VOCAB, (LM_BPTT, LM_BATCH)),
            rng.integers(0, LM_VOCAB, (LM_BPTT, LM_BATCH)))


def adamw(lib, params):
    """nanoGPT's AdamW: weight decay on matrices only."""
    return lib.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95))


def sgd(lib, params):
    return lib.optim.SGD(params, lr=0.05, momentum=0.9)


def plain_sgd(lib, params):
    """word_language_model's update: p -= lr * grad, lr 20."""
    return lib.optim.SGD(params, lr=20.0)


# name: (model builder, batch maker, optimizer, gradient-norm clip or None)
MODELS = {"gpt": (gpt, gpt_batch, adamw, 1.0),
          "resnet": (resnet, resnet_batch, sgd, None),
          "lm": (word_lm, lm_batch, plain_sgd, 0.25)}


class Step:
    """One training step of a model of MODELS in `lib`: zero_grad, forward, cross-entropy over
    the last dimension, backward, optional clipping, the optimizer."""

    def __init__(self, lib, model, x, y, optimizer, clip):
        self.lib, self.model, self.clip = lib, model, clip
        self.x, self.y = lib.from_numpy(x), lib.from_numpy(y)
        self.optimizer = optimizer(lib, list(model.parameters()))

    def forward(self):
        self.optimizer.zero_grad()
        out = self.model(self.x)
        return self.lib.nn.functional.cross_entropy(out.view(-1, out.shape[-1]),
                                                    self.y.view(-1))

    def __call__(self):
        loss = self.forward()
        loss.backward()
        if self.clip is not None:
            self.lib.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        return loss.item()


def model_steps(name, torch):
    """Model `name`'s step in each library, from the same weights and the same batch."""
    build, make_batch, optimizer, clip = MODELS[name]
    x, y = make_batch(np.random.default_rng(0))
    mg.manual_seed(0)
    ours = build(mg)
    steps = {"mpigrad": Step(mg, ours, x, y, optimizer, clip)}
    if torch is not None:
        theirs = build(torch)
        with torch.no_grad():
            for (_, p), (_, q) in zip(ours.state_dict().items(), theirs.state_dict().items()):
                q.copy_(torch.from_numpy(p.numpy().copy()))
        steps["torch"] = Step(torch, theirs, x, y, optimizer, clip)
    return steps


def peak_growth_in_child(name, lib, steps):
    """MiB by which a fresh process's peak RSS grows over `steps` steps of `lib`'s model."""
    result = subprocess.run([sys.executable, __file__, "--child-memory", name, lib, "--steps",
                             str(steps)], capture_output=True, text=True, check=True)
    return float(result.stdout.split()[-1])


def child_memory(name, lib, steps):
    torch = None
    if lib == "torch":
        import torch
        torch.set_num_threads(1)
    step = model_steps(name, torch)[lib]
    # Linux: writing 5 to clear_refs resets the peak (VmHWM) to the current size, so an
    # import's transient peak does not hide the steps'.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    for _ in range(steps):
        step()
    print((_status_kib("VmHWM") - before) / 1024)


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="steps per round (default 5)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--child-memory", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        child_memory(*args.child_memory, args.steps)
        return
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
        print("torch is not installed: mpigrad times only")
    print(f"median of {args.rounds} interleaved rounds of {args.steps} steps, float32, "
          "1 thread, CPU time")
    for name in args.only:
        bench_model(name, torch, args)


def bench_model(name, torch, args):
    steps = model_steps(name, torch)
    first = {lib: run() for lib, run in steps.items()}
    print(f"\n{name}: first-step loss " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
    times = {lib: [] for lib in steps}
    for round_number in range(args.rounds):
        for lib, run in list(steps.items())[::(-1) ** round_number]:
            times[lib].append(time_call(run, args.steps))
    row = f"  {name:9s} mpigrad {statistics.median(times['mpigrad']) * 1e3:8.2f} ms/step"
    if torch is not None:
        ratios = [m / t for m, t in zip(times["mpigrad"], times["torch"])]
        low, _, high = statistics.quantiles(ratios, n=4)
        row += (f"   torch {statistics.median(times['torch']) * 1e3:8.2f} ms/step   ratio "
                f"{statistics.median(ratios):.2f}x [{low:.2f}, {high:.2f}]")
    print(row)
    if not args.no_memory:
        growth = {lib: peak_growth_in_child(name, lib, args.steps) for lib in steps}
        print("  peak memory growth over the steps (MiB): "
              + ", ".join(f"{lib} {mib:.1f}" for lib, mib in growth.items())
              + (f"; ratio {growth['mpigrad'] / growth['torch']:.2f}x" if "torch" in growth
                 else ""))
    if not args.no_breakdown:
        print("  mpigrad's step by category (ms per step, instrumented; clipping not timed)")
        print_breakdown(name, breakdown(steps["mpigrad"], args.steps))

if __name__ == "__main__":
    main()
