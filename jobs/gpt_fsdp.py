"""train_gpt.py's `--fsdp`: the GPT fully sharded (FSDP2's `fully_shard`) instead of DDP.

Each transformer block is one unit and the root (embeddings, the tied head, the final norm)
another, so a rank keeps 1/N of the parameters, gradients and AdamW state, and holds a
block's full parameters only while it computes. Checkpoints are distributed checkpoints of
the sharded state dicts (every rank writes its shards; a resume at another world size
reshards); before the final save and the sample, rank 0 rebuilds the whole GPT from the full
state dict.
"""
import mpigrad.distributed as dist
import mpigrad.distributed.checkpoint as dcp
from mpigrad.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                       get_state_dict, set_state_dict)
from mpigrad.distributed.fsdp import fully_shard

from gpt_pipeline import PipelinedGPT


class ShardedGPT:
    """The pipeline's interface (module, replica, checkpoints, the gathered model) for a
    fully sharded GPT; `make_gpt()` builds an unsharded one of the same shape."""

    def __init__(self, gpt, make_gpt, reshard_after_forward):
        # The optimizer's groups go by these: the shards are all flat.
        self.shapes = {name: tuple(p.shape) for name, p in gpt.named_parameters()}
        for block in gpt.h:
            fully_shard(block, reshard_after_forward=reshard_after_forward)
        fully_shard(gpt, reshard_after_forward=reshard_after_forward)
        self.module, self.make_gpt = gpt, make_gpt
        self.replica, self.replicas = dist.get_rank(), dist.get_world_size()

    def state(self, optimizer, schedule, step=None, rng=None, global_batch=None):
        model_state, optimizer_state = get_state_dict(self.module, optimizer)
        return {"model": model_state, "optimizer": optimizer_state,
                "schedule": schedule.state_dict(), "step": step,
                "rng": {} if rng is None else rng,  # empty: filled by load
                "global_batch": global_batch}

    # The pipeline's: both save their own state() through DCP and find checkpoints alike.
    save_checkpoint = PipelinedGPT.save_checkpoint
    newest_checkpoint = staticmethod(PipelinedGPT.newest_checkpoint)

    def load_checkpoint(self, path, optimizer, schedule):
        """Load `path` into the shards, the optimizer and `schedule`; returns the step, the
        rng state and the global batch it was saved with."""
        state = self.state(optimizer, schedule)
        dcp.load(state, checkpoint_id=path)
        set_state_dict(self.module, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        return state["step"], state["rng"], state["global_batch"]

    def gather_model(self):
        """On rank 0 a plain GPT holding the trained weights, None elsewhere (collective)."""
        full = get_model_state_dict(self.module, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True))
        if dist.get_rank() != 0:
            return None
        gpt = self.make_gpt()
        gpt.load_state_dict(full)
        return gpt
