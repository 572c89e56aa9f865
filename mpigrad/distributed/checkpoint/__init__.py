"""mpigrad.distributed.checkpoint: torch.distributed.checkpoint (DCP) over MPI.

    import mpigrad.distributed.checkpoint as dcp
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id="ckpt/7")
    dcp.load(state_dict, checkpoint_id="ckpt/7")   # fills state_dict in place

Every rank of the process group calls both. A save writes, in parallel, one file per rank
(`__<rank>_0.distcp`, that rank's shards) and then, once every rank has written, rank 0
writes `.metadata` (which file holds which slice of what). A load reads only the slices its
state dict asks for, from whichever files hold them, so a checkpoint saved at one world size
loads at any other, or in one process. Every file is an `mpigrad.save` checkpoint: written
atomically, SHA-256 checksummed, never unpickled; a missing, damaged or foreign file is a
`ValueError` naming it, on every rank. An error on one rank is raised on all of them.

The contract for what a state dict may hold (nested dicts, and lists or tuples, walked into
as torch does). Ranks may hold different entries (each pipeline stage its own); an entry
held by several ranks is one tensor or value. The leaves are:

- a plain `Tensor`: replicated, the same on every rank holding it; written once, by the
  lowest such rank; loaded whole.
- a `FlatShard(local, global_shape, offset)`: this rank's contiguous slice of a sharded
  tensor. `local` is a 1-D Tensor holding elements [offset, offset + len(local)) of the
  tensor of shape `global_shape` flattened in row-major order; elements past the tensor's end
  are padding (FSDP's padded flat shards), neither saved nor loaded. At save the ranks'
  slices must cover the tensor exactly once (ValueError otherwise). At load any FlatShard (or
  plain Tensor) with the saved global shape is filled from the saved slices, however the
  saving ranks split them: this is the resharding.
- any other value (numbers, strings, None, numpy arrays, lists of them: optimizer
  hyper-parameters, step counters) is replicated: the lowest rank holding it writes it, and
  load replaces the state dict's value with it. An empty dict or list in the state dict
  where the checkpoint has entries (a fresh optimizer's `state`) is filled with them,
  tensors whole and plain.

Differences from torch: no custom planners or storage layers (`FileSystemWriter` and
`FileSystemReader` name a directory, nothing more); a rank reads each shard file it needs
whole (one at a time: a load holds its share and one file); `save` returns None, not
torch's `Metadata`.
"""
from .filesystem import FileSystemReader, FileSystemWriter
from .flat_shard import FlatShard
from .state_dict_loader import load
from .state_dict_saver import save

__all__ = ["save", "load", "FlatShard", "FileSystemWriter", "FileSystemReader"]
