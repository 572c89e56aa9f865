"""The files of a checkpoint directory: `__<rank>_0.distcp`, one per saving rank, and
`.metadata` (torch's names). Each is an mpigrad checkpoint (`mpigrad.save`): written
atomically, checksummed, never unpickled, so a damaged file is the `ValueError` naming it that
`mpigrad.load` raises. Every file carries the save's id, so a shard left over from another
save (an interrupted overwrite, a copy mixed in) is refused by name too."""
import os

from ... import serialization

METADATA = ".metadata"
FORMAT = "mpigrad.distributed.checkpoint"
VERSION = 1


def shard_path(directory, rank):
    return os.path.join(os.fspath(directory), f"__{rank}_0.distcp")


def write_shard(directory, rank, save_id, arrays, objects):
    """Rank `rank`'s file: `arrays` and `objects` map entry indices to what it stores."""
    os.makedirs(directory, exist_ok=True)
    serialization.save({"save_id": save_id, "rank": rank, "arrays": arrays,
                        "objects": objects}, shard_path(directory, rank))


def write_metadata(directory, save_id, world_size, entries):
    serialization.save({"format": FORMAT, "version": VERSION, "save_id": save_id,
                        "world_size": world_size, "entries": entries},
                       os.path.join(os.fspath(directory), METADATA))


def remove_other_shards(directory, world_size):
    """Delete the shard files of ranks >= `world_size`: left by an earlier save of more ranks
    into the same directory, they belong to no checkpoint once the new metadata is written."""
    rank = world_size
    while os.path.exists(shard_path(directory, rank)):
        os.remove(shard_path(directory, rank))
        rank += 1


def read_metadata(directory):
    path = os.path.join(os.fspath(directory), METADATA)
    if not os.path.isfile(path):
        what = "directory" if os.path.isdir(directory) else "path"
        raise ValueError(f"{path} is missing: the {what} {os.fspath(directory)} holds no "
                         "complete distributed checkpoint (its save did not finish, or it "
                         "is another kind of directory)")
    metadata = serialization.load(path)
    if not (isinstance(metadata, dict) and metadata.get("format") == FORMAT):
        raise ValueError(f"{path} is not the metadata of an mpigrad distributed checkpoint")
    if metadata.get("version") != VERSION:
        raise ValueError(f"{path} has format version {metadata.get('version')!r}; this "
                         f"mpigrad reads version {VERSION}")
    return metadata


def read_shard(directory, rank, save_id):
    """The arrays and objects rank `rank` saved; ValueError naming the file if it is missing,
    damaged or from another save."""
    path = shard_path(directory, rank)
    if not os.path.isfile(path):
        raise ValueError(f"{path} is missing: rank {rank}'s shard of the checkpoint in "
                         f"{os.fspath(directory)} (restore the file, or load an intact "
                         "checkpoint)")
    shard = serialization.load(path)
    if not (isinstance(shard, dict) and shard.get("save_id") == save_id
            and shard.get("rank") == rank):
        raise ValueError(f"{path} does not belong to this checkpoint: it is rank "
                         f"{shard.get('rank') if isinstance(shard, dict) else '?'}'s shard "
                         "of another save (an overwrite that did not finish?)")
    return shard["arrays"], shard["objects"]


class FileSystemWriter:
    """torch's storage writer for a directory: `save(sd, storage_writer=FileSystemWriter(d))`
    is `save(sd, checkpoint_id=d)`."""

    def __init__(self, path):
        self.path = os.fspath(path)


class FileSystemReader:
    """torch's storage reader for a directory: `load(sd, storage_reader=FileSystemReader(d))`
    is `load(sd, checkpoint_id=d)`."""

    def __init__(self, path):
        self.path = os.fspath(path)
