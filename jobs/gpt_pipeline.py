"""train_gpt.py's `--pipeline-stages K`: the GPT cut into K pipeline stages.

Ranks form a grid: rank = replica * K + stage. Each pipeline (K consecutive ranks) runs the
model as a chain (embeddings, the blocks, the final norm and head) cut into K stages of about
equal length, with Schedule1F1B over `--grad-accum` micro-batches; with several pipelines,
each stage's module is in DistributedDataParallel with its twins (the same stage in the other
pipelines), which train on their own share of the batch as DDP ranks do. The tied embedding
and head weight lives on the first and last stage: their gradients are summed after each step
so both copies step alike (Megatron-LM's way). Gradients are clipped by the norm over all
stages. Checkpoints are distributed checkpoints (directories, every rank writing its stage's
state); before the final save and the sample, the pipeline of rank 0 gathers the whole model.
"""
import glob
import math
import os

import numpy as np

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.checkpoint as dcp
import mpigrad.nn.functional as F
from mpigrad import nn
from mpigrad.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                            SplitPoint, pipeline)
from mpigrad.nn.parallel import DistributedDataParallel
from mpigrad.nn.utils.clip_grad import clip_grads_with_norm_, get_total_norm


class Embeddings(nn.Module):
    """The GPT's token and position embeddings (the same modules, not copies)."""

    def __init__(self, gpt):
        super().__init__()
        self.wte, self.wpe, self.drop = gpt.wte, gpt.wpe, gpt.drop

    def forward(self, idx):
        return self.drop(self.wte(idx) + self.wpe(mg.arange(idx.shape[1])))


class Head(nn.Module):
    def __init__(self, gpt):
        super().__init__()
        self.ln_f, self.lm_head = gpt.ln_f, gpt.lm_head

    def forward(self, x):
        return self.lm_head(self.ln_f(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                           ignore_index=-1)


class PipelinedGPT:
    def __init__(self, gpt, args, rank, world):
        stages = args.pipeline_stages
        self.replicas = world // stages
        self.replica, self.stage_index = divmod(rank, stages)
        self.stages = stages
        # Every rank creates every group, in the same order, as new_group requires.
        pipelines = [dist.new_group(range(r * stages, (r + 1) * stages))
                     for r in range(self.replicas)]
        twins = [dist.new_group(range(s, world, stages)) for s in range(stages)]
        ties = [dist.new_group([r * stages, r * stages + stages - 1])
                for r in range(self.replicas)]
        self.pipelines, self.group = pipelines, pipelines[self.replica]
        self.tie_group = ties[self.replica]
        chain = nn.Sequential(Embeddings(gpt), *gpt.h, Head(gpt))
        bounds = [round(k * len(chain) / stages) for k in range(1, stages)]
        example = mg.zeros(1, args.block_size, dtype=mg.int64)
        self.pipe = pipeline(chain, (example,),
                             split_spec={str(b): SplitPoint.BEGINNING for b in bounds})
        self.module = self.pipe.get_stage_module(self.stage_index)
        wrapped = self.module if self.replicas == 1 else DistributedDataParallel(
            self.module, process_group=twins[self.stage_index])
        self.stage = PipelineStage(wrapped, self.stage_index, stages, group=self.group)
        self.train_schedule = Schedule1F1B(self.stage, args.grad_accum, loss_fn=lm_loss)
        self.eval_schedule = ScheduleGPipe(self.stage, 1)
        self.tied = gpt.wte.weight

    # ------------------------------------------------------------------ steps
    def train_step(self, x, y):
        """One step on this pipeline's windows (all micro-batches, in order); the micro-batch
        losses on the last stage, [] elsewhere."""
        losses = []
        self._run(self.train_schedule, x, y, losses)
        if self.stage.is_first or self.stage.is_last:
            dist.all_reduce(self.tied.grad, group=self.tie_group)
        return [loss.item() for loss in losses]

    def _run(self, schedule, x, y, losses=None):
        if self.stage.is_first:
            return schedule.step(x)
        if self.stage.is_last:
            return schedule.step(target=y, losses=losses)
        return schedule.step()

    def clip_grad_norm_(self, max_norm):
        """Clip by the norm of every stage's gradients (the tied weight's counted once)."""
        params = [p for p in self.module.parameters() if p.grad is not None]
        counted = [p.grad for p in params if not (self.stage.is_last and p is self.tied)]
        local = float(get_total_norm(counted).item()) if counted else 0.0
        squares = np.array([local ** 2])
        dist.all_reduce(squares, group=self.group)
        clip_grads_with_norm_(params, max_norm, mg.tensor(math.sqrt(squares[0])))

    def validation_loss(self, gpt, chars, args):
        gpt.eval()
        total = np.zeros(2)
        share = args.batch_size * self.replicas
        starts = chars.starts("val", args.eval_batches * share, args.seed)
        with mg.no_grad():
            for batch in range(args.eval_batches):
                mine = starts[batch * share:][self.replica:share:self.replicas]
                x, y = chars.windows("val", mine)
                logits = self._run(self.eval_schedule, x, y)
                if self.stage.is_last:
                    total += [lm_loss(logits, y).item() * len(mine), len(mine)]
        gpt.train()
        dist.all_reduce(total)
        return total[0] / total[1]

    def gather_model(self):
        """Make the whole model current in pipeline 0's processes (rank 0 samples and saves
        it): each stage's parameters from the rank that trains them."""
        if self.replica != 0:
            return
        for stage in range(self.stages):
            for param in self.pipe.get_stage_module(stage).parameters():
                dist.broadcast(param.data, src=stage, group=self.pipelines[0])

    # ------------------------------------------------------------------ checkpoints
    def state(self, optimizer, schedule, step=None, rng=None, global_batch=None):
        return {f"stage{self.stage_index}": {"model": self.module.state_dict(),
                                             "optimizer": optimizer.state_dict()},
                "schedule": schedule.state_dict(), "step": step,
                "rng": {} if rng is None else rng,  # empty: filled by load
                "global_batch": global_batch}

    def save_checkpoint(self, directory, optimizer, schedule, step, global_batch):
        dcp.save(self.state(optimizer, schedule, step, mg.get_rng_state(), global_batch),
                 checkpoint_id=directory)

    def newest_checkpoint(self, directory):
        paths = sorted(glob.glob(os.path.join(directory, "ckpt-*.dcp")))
        steps = []
        for path in paths:
            holder = {"step": None}
            dcp.load(holder, checkpoint_id=path)
            steps.append(holder["step"])
        return paths[int(np.argmax(steps))] if paths else None

    def load_checkpoint(self, path, optimizer, schedule):
        """Load `path` into this stage's module and optimizer and `schedule`; returns the
        step, the rng state and the global batch it was saved with."""
        state = self.state(optimizer, schedule)
        dcp.load(state, checkpoint_id=path)
        mine = state[f"stage{self.stage_index}"]
        self.module.load_state_dict(mine["model"])
        optimizer.load_state_dict(mine["optimizer"])
        schedule.load_state_dict(state["schedule"])
        return state["step"], state["rng"], state["global_batch"]
