"""`save`: every rank writes its own shard file in parallel, then rank 0 the metadata."""
import secrets

from . import filesystem
from . import planner as plans  # `planner` is save()'s argument, as in torch
from .agreement import Ranks, checkpoint_directory
from .flat_shard import FlatShard

__all__ = ["save"]


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
         process_group=None, no_dist=False):
    """Save `state_dict` as a distributed checkpoint in the directory `checkpoint_id`, as
    torch.distributed.checkpoint.save: called by every rank of `process_group` (the default
    group; a world of one when none is initialised or with `no_dist`). Ranks may hold
    different entries (each pipeline stage its own). Plain Tensors and other values are
    replicated (written once, by the lowest rank holding them); FlatShards are written by the
    rank holding them. Returns when the whole checkpoint is on disk; an error on any rank (a
    state dict that does not fit the others', a failed write) is raised on every rank, and
    then the directory holds no new metadata."""
    if planner is not None:
        raise NotImplementedError("save(planner=...): mpigrad's DCP has one planner (the "
                                  "default one's behaviour); leave planner=None")
    directory = checkpoint_directory(checkpoint_id, storage_writer, "save")
    ranks = Ranks(process_group, no_dist, "save")
    leaves = []

    def plan():
        leaves[:] = plans.flatten(state_dict)
        # Rank 0 names the save; every file carries the name, binding them together.
        return plans.local_plan(leaves), secrets.token_hex(8)

    shared = ranks.agree(plan, share=True)
    save_id = shared[0][1]
    entries = plans.global_entries([local for local, _ in shared])
    ranks.agree(lambda: _write_shard(directory, ranks.rank, save_id, leaves, entries))

    def finish():
        if ranks.rank == 0:
            filesystem.write_metadata(directory, save_id, ranks.size, entries)
            filesystem.remove_other_shards(directory, ranks.size)

    ranks.agree(finish)



def _write_shard(directory, rank, save_id, leaves, entries):
    held = {leaf[0]: leaf[1] for leaf in leaves}
    arrays, objects = {}, {}
    for index, entry in enumerate(entries):
        leaf = held.get(plans.key_of(entry["path"]))
        if entry["kind"] == plans.OBJECT:
            if entry["rank"] == rank:
                objects[index] = leaf
        elif isinstance(leaf, FlatShard):
            if leaf.length:
                arrays[index] = leaf.local._array[:leaf.length]
        elif any(chunk[0] == rank for chunk in entry["chunks"]):
            arrays[index] = leaf._array.reshape(-1)
    filesystem.write_shard(directory, rank, save_id, arrays, objects)
