"""Training steps of the models of the day against PyTorch: a GPT.

    python jobs/bench/bench_models.py [--steps 5] [--rounds 7] [--no-memory] [--no-breakdown]

gpt: nanoGPT's model with scaled_dot_product_attention (4 layers, 4 heads, n_embd 128, block
64, vocabulary 96, tied embedding), batch 16, float32, one thread; a step is zero_grad,
forward, cross-entropy, backward, clip_grad_norm_(1.0) and AdamW (no decay on biases and
norms), both libraries from the same weights and data.

The libraries run interleaved, round after round, and the ratio reported is the median of the
rounds' own ratios mpigrad / torch (with quartiles), in the running thread's CPU time, as in
bench_engine.py. Peak memory: each library's step runs in a child process of its own, and
the growth of its peak resident set from just before the first step to after the last (the
activations, gradients, optimizer state and scratch of a step) is compared. Then one
instrumented step splits mpigrad's time by category (bench_engine.py's categories).
"""
from harness import breakdown, print_breakdown, time_call  # first: one BLAS thread per process

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402

VOCAB, BLOCK, BATCH = 96, 64, 16
GPT_SHAPE = dict(n_layer=4, n_head=4, n_embd=128)


def gpt(lib, n_layer, n_head, n_embd):
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


class GPTStep:
    def __init__(self, lib, model, x, y):
        self.lib, self.model = lib, model
        self.x, self.y = lib.from_numpy(x), lib.from_numpy(y)
        params = list(model.parameters())
        self.optimizer = lib.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=3e-4, betas=(0.9, 0.95))

    def forward(self):
        self.optimizer.zero_grad()
        logits = self.model(self.x)
        return self.lib.nn.functional.cross_entropy(logits.view(-1, VOCAB), self.y.view(-1))

    def __call__(self):
        loss = self.forward()
        loss.backward()
        self.lib.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()


def gpt_steps(torch):
    """The step of each library, from the same weights and the same batch."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, VOCAB, (BATCH, BLOCK))
    y = rng.integers(0, VOCAB, (BATCH, BLOCK))
    mg.manual_seed(0)
    ours = gpt(mg, **GPT_SHAPE)
    steps = {"mpigrad": GPTStep(mg, ours, x, y)}
    if torch is not None:
        theirs = gpt(torch, **GPT_SHAPE)
        with torch.no_grad():
            for (name, p), (_, q) in zip(ours.state_dict().items(),
                                         theirs.state_dict().items()):
                q.copy_(torch.from_numpy(p.numpy().copy()))
        steps["torch"] = GPTStep(torch, theirs, x, y)
    return steps


def peak_growth_in_child(lib, steps):
    """MiB by which a fresh process's peak RSS grows over `steps` steps of `lib`'s GPT."""
    result = subprocess.run([sys.executable, __file__, "--child-memory", lib, "--steps",
                             str(steps)], capture_output=True, text=True, check=True)
    return float(result.stdout.split()[-1])


def child_memory(lib, steps):
    torch = None
    if lib == "torch":
        import torch
        torch.set_num_threads(1)
    step = gpt_steps(torch)[lib]
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
    parser.add_argument("--child-memory", choices=["mpigrad", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        child_memory(args.child_memory, args.steps)
        return
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
        print("torch is not installed: mpigrad times only")
    steps = gpt_steps(torch)
    first = {lib: run() for lib, run in steps.items()}
    print("gpt: first-step loss " + ", ".join(f"{k} {v:.6f}" for k, v in first.items())
          + f" (uniform: {math.log(VOCAB):.6f})")
    times = {lib: [] for lib in steps}
    for round_number in range(args.rounds):
        for lib, run in list(steps.items())[::(-1) ** round_number]:
            times[lib].append(time_call(run, args.steps))
    print(f"\nmedian of {args.rounds} interleaved rounds of {args.steps} steps, float32, "
          "1 thread, CPU time")
    row = f"  gpt       mpigrad {statistics.median(times['mpigrad']) * 1e3:8.2f} ms/step"
    if torch is not None:
        ratios = [m / t for m, t in zip(times["mpigrad"], times["torch"])]
        low, _, high = statistics.quantiles(ratios, n=4)
        row += (f"   torch {statistics.median(times['torch']) * 1e3:8.2f} ms/step   ratio "
                f"{statistics.median(ratios):.2f}x [{low:.2f}, {high:.2f}]")
    print(row)
    if not args.no_memory:
        growth = {lib: peak_growth_in_child(lib, args.steps) for lib in steps}
        print("peak memory growth over the steps (MiB): "
              + ", ".join(f"{lib} {mib:.1f}" for lib, mib in growth.items())
              + (f"; ratio {growth['mpigrad'] / growth['torch']:.2f}x" if "torch" in growth
                 else ""))
    if not args.no_breakdown:
        print("\nmpigrad's step by category (ms per step, instrumented; clipping not timed)")
        print_breakdown("gpt", breakdown(steps["mpigrad"], args.steps))


if __name__ == "__main__":
    main()
