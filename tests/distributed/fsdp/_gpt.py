"""The GPT of jobs/train_gpt.py at a size whose parameters do not divide by 2 or 3 (n_embd 5:
65-, 75- and 5-element tensors), its batches, and the one-process oracle the sharded runs
must equal."""
import sys
from pathlib import Path

import numpy as np

import mpigrad as mg

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "jobs"))
from train_gpt import GPT, Block  # noqa: E402

__all__ = ["GPT", "Block", "build", "batches", "train", "full_params", "VOCAB", "BATCH"]

VOCAB, BLOCK, BATCH = 13, 6, 6   # a global batch of 6 splits over 1, 2 and 3 ranks


def build(n_layer=2, n_embd=5, n_head=1, seed=0):
    mg.manual_seed(seed)
    return GPT(VOCAB, BLOCK, n_layer, n_head, n_embd, 0.0).double()


def batches(steps, micro, seed=7):
    """`steps` lists of `micro` global (idx, targets) batches."""
    rng = np.random.default_rng(seed)
    return [[(rng.integers(0, VOCAB, (BATCH, BLOCK)), rng.integers(0, VOCAB, (BATCH, BLOCK)))
             for _ in range(micro)] for _ in range(steps)]


def train(model, data, rank, world, clip=None, sync=None, clip_norm=None, lr=1e-2):
    """AdamW steps over `data`, each rank on its slice of every micro-batch; the first
    micro-batches of a step run with `sync(False)`, the last with `sync(True)`. `clip(max)`
    clips and returns the norm. Returns (optimizer, losses, norms)."""
    opt = mg.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    per = BATCH // world
    losses, norms = [], []
    for step in data:
        opt.zero_grad()
        for k, (idx, targets) in enumerate(step):
            if sync is not None:
                sync(k == len(step) - 1)
            rows = slice(rank * per, (rank + 1) * per)
            _, loss = model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
            (loss / len(step)).backward()
            losses.append(loss.item())
        if clip is not None:
            norms.append(float(clip(clip_norm).item()))
        opt.step()
    return opt, losses, norms


def full_params(model):
    """name -> full value of every parameter of a (possibly sharded) model (collective)."""
    from mpigrad.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {name: value._array for name, value in full.items()}
