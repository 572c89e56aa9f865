"""A character-level GPT trained with DistributedDataParallel, written the way nanoGPT
writes it (weight tying, a registered causal mask, AdamW without decay on biases and norms).

    mpiexec -n 2 python jobs/train_gpt.py                   # Python's own sources, ~1 min
    mpiexec -n 4 python jobs/train_gpt.py --text input.txt --steps 2000 --n-layer 6
    srun --mpi=pmi2 python jobs/train_gpt.py --checkpoint runs/gpt --resume

The text is the Python standard library's source files of the running interpreter (real text,
on every machine, offline), or `--text FILE`; 90% trains, 10% validates. Each step draws one
global batch of windows from a generator seeded by the step number, and rank r takes every
world-size-th window, so N ranks with `--batch-size B` train exactly as one process with
N * B, and a resumed run continues bit for bit. `--grad-accum K` runs K micro-batches per
step (DDP reduces only the last). The lr warms up linearly, then follows a cosine; gradients
are clipped to `--clip` before each step. `--pipeline-stages K` cuts the model into K
pipeline stages over K ranks, the micro-batches flowing through them (1F1B), with data
parallelism over the ranks' other dimension (gpt_pipeline.py); it trains as DDP does.

Rank 0 shows a progress bar, prints the validation loss every `--eval-interval` steps (an
"epoch" in the metrics file that jobs/tools/plot.py draws), and at the end a sample of generated
text. On SIGUSR1 or SIGTERM all ranks stop at the next step, rank 0 saves a checkpoint of the
exact step, and the job exits with code 99 (requeue me); `--resume` continues from it.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import string  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import nn, optim  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel  # noqa: E402
from mpigrad.nn.utils import clip_grad_norm_  # noqa: E402

from common import (PREEMPTED_EXIT_CODE, StopFlag, add_text_job_arguments,  # noqa: E402
                    check_checkpoint_directory, finish, log, mean_over_ranks, positive_float,
                    positive_int, text_files, use_dtype)
from gpt_pipeline import PipelinedGPT  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Character-level GPT with DDP (launch with "
                                            "mpiexec or srun).")
    p.add_argument("--max-chars", type=positive_int, default=1_000_000,
                   help="characters of the standard library to read (default 1,000,000)")
    p.add_argument("--n-layer", type=positive_int, default=4, help="blocks (default 4)")
    p.add_argument("--n-head", type=positive_int, default=4, help="attention heads (default 4)")
    p.add_argument("--n-embd", type=positive_int, default=64, help="width (default 64)")
    p.add_argument("--block-size", type=positive_int, default=64,
                   help="context length in characters (default 64)")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout (default 0)")
    p.add_argument("--batch-size", type=positive_int, default=16,
                   help="windows per rank per micro-batch (default 16)")
    p.add_argument("--grad-accum", type=positive_int, default=1,
                   help="micro-batches per optimizer step (default 1)")
    p.add_argument("--steps", type=positive_int, default=800,
                   help="optimizer steps (default 800)")
    p.add_argument("--lr", type=positive_float, default=3e-3, help="peak lr (default 3e-3)")
    p.add_argument("--warmup", type=int, default=50, help="warm-up steps (default 50)")
    p.add_argument("--min-lr", type=float, default=3e-4, help="final lr (default 3e-4)")
    p.add_argument("--weight-decay", type=float, default=0.1,
                   help="AdamW decay of the weight matrices (default 0.1)")
    p.add_argument("--clip", type=positive_float, default=1.0,
                   help="gradient norm clip (default 1.0)")
    p.add_argument("--eval-interval", type=positive_int, default=100,
                   help="steps between validations, one 'epoch' of metrics (default 100)")
    p.add_argument("--eval-batches", type=positive_int, default=8,
                   help="validation batches per rank (default 8)")
    p.add_argument("--sample-chars", type=int, default=300,
                   help="characters generated at the end (default 300; 0: none)")
    add_text_job_arguments(p, seeds="weights and batches")
    p.add_argument("--checkpoint", metavar="DIR", default=None,
                   help="save a checkpoint here after every validation and on preemption")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in --checkpoint DIR")
    p.add_argument("--metrics", metavar="FILE", default=None,
                   help="append one JSON line per validation (for jobs/tools/plot.py)")
    p.add_argument("--pipeline-stages", type=positive_int, default=1, metavar="K",
                   help="cut the model into K pipeline stages; the ranks (a multiple of K) "
                        "are pipelines of K, data parallel with each other (default 1)")
    args = p.parse_args(argv)
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint DIR")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    if not 0 <= args.warmup < args.steps:
        p.error(f"--warmup must be in [0, --steps), got {args.warmup}")
    if args.pipeline_stages > args.n_layer + 2:
        p.error(f"--pipeline-stages {args.pipeline_stages}: the model has only "
                f"{args.n_layer + 2} parts to cut (embeddings, {args.n_layer} blocks, head)")
    return args


def read_text(args):
    """The training text's first --max-chars printable characters."""
    parts, total = [], 0
    for path in text_files(args):
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
        total += len(parts[-1])
        if total >= args.max_chars:
            break
    allowed = set(string.printable)
    return "".join(c if c in allowed else "?" for c in "".join(parts)[:args.max_chars])


class CharData:
    """The text as token ids, split 90/10, and the vocabulary both ways."""

    def __init__(self, text, block_size):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        ids = np.array([self.index[c] for c in text], dtype=np.int64)
        cut = int(len(ids) * 0.9)
        self.train, self.val = ids[:cut], ids[cut:]
        if len(self.val) <= block_size + 1:
            raise SystemExit(f"the text has {len(text)} characters: too short for "
                             f"--block-size {block_size}")
        self.block_size = block_size

    def windows(self, split, starts):
        """(inputs, next-character targets) of the windows starting at `starts`."""
        ids = self.train if split == "train" else self.val
        x = np.stack([ids[s:s + self.block_size] for s in starts])
        y = np.stack([ids[s + 1:s + 1 + self.block_size] for s in starts])
        return mg.tensor(x), mg.tensor(y)

    def starts(self, split, count, seed):
        ids = self.train if split == "train" else self.val
        return np.random.default_rng(seed).integers(0, len(ids) - self.block_size - 1, count)

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.dropout = n_head, dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size, dropout)
                               for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        positions = mg.arange(idx.shape[1])
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                               ignore_index=-1)
        return logits, loss

    @mg.no_grad()
    def generate(self, idx, new_tokens, temperature=0.8, top_k=20, generator=None):
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.block_size:])
            logits = logits[:, -1, :] / temperature
            kth = mg.topk(logits, min(top_k, logits.shape[-1])).values[:, [-1]]
            logits = logits.masked_fill(logits < kth, float("-inf"))
            next_id = mg.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = mg.cat([idx, next_id], dim=1)
        return idx


def param_groups(model, weight_decay):
    """Decay the matrices (and embeddings), not the biases and norm weights."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]


def make_schedule(optimizer, args):
    decay = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps - args.warmup,
                                                 eta_min=args.min_lr)
    if not args.warmup:
        return decay
    warmup = optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / args.warmup,
                                         total_iters=args.warmup)
    return optim.lr_scheduler.SequentialLR(optimizer, [warmup, decay],
                                           milestones=[args.warmup])


def validation_loss(model, chars, args, rank, world):
    """Mean loss over the same validation windows whatever the world size."""
    model.eval()
    total, count = 0.0, 0
    starts = chars.starts("val", args.eval_batches * args.batch_size * world, args.seed)
    with mg.no_grad():
        for batch in range(args.eval_batches):
            mine = starts[batch * args.batch_size * world:][rank:args.batch_size * world:world]
            _, loss = model(*chars.windows("val", mine))
            total += loss.item() * len(mine)
            count += len(mine)
    model.train()
    return mean_over_ranks(total, count)


def newest_checkpoint(directory):
    paths = glob.glob(os.path.join(directory, "ckpt-*.npz"))
    return max(paths, key=lambda p: mg.load(p)["step"]) if paths else None


def save_checkpoint(path, model, optimizer, schedule, step, data_world, args, rank, pipe):
    """`path`.npz from rank 0, or with a pipeline `path`.dcp, a distributed checkpoint that
    every rank writes its stage's state to."""
    global_batch = data_world * args.batch_size
    if pipe:
        pipe.save_checkpoint(path + ".dcp", optimizer, schedule, step, global_batch)
    elif rank == 0:
        mg.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "schedule": schedule.state_dict(), "step": step, "rng": mg.get_rng_state(),
                 "global_batch": global_batch}, path + ".npz")


def train(args):
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    chars = CharData(read_text(args), args.block_size)
    use_dtype(args)
    mg.manual_seed(args.seed)
    model = GPT(len(chars.chars), args.block_size, args.n_layer, args.n_head, args.n_embd,
                args.dropout)
    pipe = None
    if args.pipeline_stages > 1:
        if world % args.pipeline_stages:
            log(rank, f"error: {world} ranks cannot form pipelines of --pipeline-stages "
                      f"{args.pipeline_stages}")
            return 1
        pipe = PipelinedGPT(model, args, rank, world)
    # What this rank trains: its pipeline stage, or the whole model.
    trained = pipe.module if pipe else model
    data_rank, data_world = (pipe.replica, pipe.replicas) if pipe else (rank, world)
    optimizer = optim.AdamW(param_groups(trained, args.weight_decay), lr=args.lr,
                            betas=(0.9, 0.95))
    schedule = make_schedule(optimizer, args)
    step = 0
    if args.checkpoint:
        problem = check_checkpoint_directory(args.checkpoint, rank)
        if problem:
            log(rank, f"error: {problem}")
            return 1
    newest = pipe.newest_checkpoint if pipe else newest_checkpoint
    if args.resume and (path := newest(args.checkpoint)):
        if pipe:
            step, rng, global_batch = pipe.load_checkpoint(path, optimizer, schedule)
        else:
            state = mg.load(path)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["schedule"])
            step, rng, global_batch = state["step"], state["rng"], state["global_batch"]
        if global_batch != data_world * args.batch_size:
            log(rank, f"error: {path} was trained with a global batch of "
                      f"{global_batch}; resume with ranks x --batch-size equal to it")
            return 1
        mg.set_rng_state(rng)
        log(rank, f"resuming from {path} at step {step}")
    ddp = None if pipe else DistributedDataParallel(model)
    stop = StopFlag()
    params = sum(p.numel() for p in model.parameters())
    log(rank, f"GPT of {params} parameters on {len(chars.train)} training characters "
              f"(vocabulary {len(chars.chars)}), {world} ranks x batch {args.batch_size} x "
              f"{args.grad_accum} micro-batches, {args.steps} steps"
              + (f", pipelines of {args.pipeline_stages} stages" if pipe else ""))
    progress = None
    if rank == 0:
        from tqdm import tqdm
        progress = tqdm(total=args.steps, initial=step, desc="steps", disable=None,
                        file=sys.stderr)
    window_losses, window_steps, started = [], 0, time.perf_counter()
    while step < args.steps:
        if stop.agreed():
            if args.checkpoint:
                save_checkpoint(os.path.join(args.checkpoint, "ckpt-preempt"), model,
                                optimizer, schedule, step, data_world, args, rank, pipe)
            dist.barrier()
            log(rank, f"stopped by signal at step {step}; checkpoint "
                      f"{'saved' if args.checkpoint else 'not saved (no --checkpoint)'}")
            return PREEMPTED_EXIT_CODE
        per_micro = args.batch_size * data_world
        starts = chars.starts("train", per_micro * args.grad_accum, [args.seed, step])
        micro_starts = [starts[micro * per_micro:(micro + 1) * per_micro][data_rank::data_world]
                        for micro in range(args.grad_accum)]
        optimizer.zero_grad()
        if pipe:
            window_losses += pipe.train_step(*chars.windows("train",
                                                            np.concatenate(micro_starts)))
            pipe.clip_grad_norm_(args.clip)
        else:
            for micro, mine in enumerate(micro_starts):
                last = micro == args.grad_accum - 1
                with ddp.no_sync() if not last else contextlib.nullcontext():
                    _, loss = ddp(*chars.windows("train", mine))
                    (loss / args.grad_accum).backward()
                window_losses.append(loss.item())
            clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        schedule.step()
        step += 1
        window_steps += 1
        if progress is not None:
            progress.update(1)
            if window_losses:  # a pipeline's losses are on its last stage
                progress.set_postfix(loss=f"{window_losses[-1]:.3f}")
        if step % args.eval_interval == 0 or step == args.steps:
            elapsed = time.perf_counter() - started
            # A pipeline's losses are on its last stage: the other ranks count none.
            train_loss = mean_over_ranks(np.mean(window_losses) if window_losses else 0.0,
                                         len(window_losses) > 0)
            val = pipe.validation_loss(model, chars, args) if pipe else \
                validation_loss(model, chars, args, rank, world)
            metrics = {"epoch": math.ceil(step / args.eval_interval), "step": step,
                       "loss": train_loss, "val_loss": val,
                       "lr": schedule.get_last_lr()[0],
                       "samples_per_sec": window_steps * args.grad_accum * per_micro / elapsed}
            log(rank, f"step {step}/{args.steps} train loss {metrics['loss']:.4f} val loss "
                      f"{val:.4f} lr {metrics['lr']:.2e} windows/s "
                      f"{metrics['samples_per_sec']:.0f}")
            if rank == 0 and args.metrics:
                with open(args.metrics, "a") as f:
                    f.write(json.dumps(metrics) + "\n")
            if args.checkpoint:
                save_checkpoint(os.path.join(args.checkpoint, f"ckpt-{step:06d}"), model,
                                optimizer, schedule, step, data_world, args, rank, pipe)
            window_losses, window_steps, started = [], 0, time.perf_counter()
    if progress is not None:
        progress.close()
    if pipe:
        pipe.gather_model()
    if rank == 0:
        if args.checkpoint:
            mg.save(model.state_dict(), os.path.join(args.checkpoint, "final.npz"))
        if args.sample_chars:
            prompt = mg.tensor([[chars.index["\n"] if "\n" in chars.index else 0]])
            ids = model.generate(prompt, args.sample_chars,
                                 generator=mg.Generator().manual_seed(args.seed))
            print("sample:\n" + chars.decode(ids[0].tolist()), flush=True)
    return finish(rank, f"steps={step}")


if __name__ == "__main__":
    sys.exit(train(parse_args()))
