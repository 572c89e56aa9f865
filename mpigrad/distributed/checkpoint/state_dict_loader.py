"""`load`: every rank reads the slices its state dict asks for from whichever shard files hold
them, so a checkpoint saved by any number of ranks loads into any other (resharding).

A rank first plans: for each entry of its state dict, a buffer for the elements it needs and,
per shard file, the copies that fill it. Then it reads the files one at a time, each dropped
once its copies are done, so a load holds this rank's share plus one file, not the whole
checkpoint. Only when every rank has read and checked everything are the state dicts written.
"""
from collections import defaultdict

import numpy as np

from ...tensor import Tensor
from . import filesystem
from . import planner as plans  # `planner` is load()'s argument, as in torch
from .agreement import Ranks, checkpoint_directory
from .flat_shard import FlatShard

__all__ = ["load"]


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None,
         process_group=None, no_dist=False):
    """Load the checkpoint in `checkpoint_id` into `state_dict` in place, as
    torch.distributed.checkpoint.load: a Tensor is filled whole, a FlatShard's `local` with its
    slice (whatever ranks saved it), any other value is replaced by the saved one, and an empty
    dict or list where the checkpoint holds entries (a fresh optimizer's `state`) is filled
    with them, tensors whole. Entries of the checkpoint the state dict lacks are ignored; an
    entry of the state dict the checkpoint lacks is a RuntimeError, a shape that differs a
    ValueError, and a missing, damaged or foreign file a ValueError naming it. Everything is
    read and checked before anything is written; an error on any rank is raised on every rank
    and leaves every state dict as it was."""
    if planner is not None:
        raise NotImplementedError("load(planner=...): mpigrad's DCP has one planner (the "
                                  "default one's behaviour); leave planner=None")
    directory = checkpoint_directory(checkpoint_id, storage_reader, "load")
    ranks = Ranks(process_group, no_dist, "load")
    writes = ranks.agree(lambda: _Reading(directory).plan(state_dict))
    for write in writes:
        write()


class _Reading:
    """One rank's reading of a checkpoint: the writes its state dict needs, staged."""

    def __init__(self, directory):
        self.directory = directory
        self.metadata = filesystem.read_metadata(directory)
        self.index = {plans.key_of(entry["path"]): (i, entry)
                      for i, entry in enumerate(self.metadata["entries"])}
        self.copies = defaultdict(list)  # rank -> [copy(arrays, objects)] from its file

    def plan(self, state_dict):
        writes = []
        for path, leaf, container, key in plans.flatten(state_dict):
            found = self.index.get(path)
            if found is None and _is_empty_container(leaf) and self._under(path):
                writes.append(_replacing(container, key, self._subtree(path), path))
            elif found is None:
                raise RuntimeError(f"Missing key in checkpoint state_dict: {plans.text(path)}.")
            else:
                writes.append(self._write(path, leaf, container, key, *found))
        for rank in sorted(self.copies):
            arrays, objects = filesystem.read_shard(self.directory, rank,
                                                    self.metadata["save_id"])
            for copy in self.copies.pop(rank):
                copy(arrays, objects)
        return writes

    def _write(self, path, leaf, container, key, index, entry):
        name = plans.text(path)
        if entry["kind"] == plans.OBJECT:
            if isinstance(leaf, (Tensor, FlatShard)):
                raise ValueError(f"{name} is a {type(leaf).__name__} in the state dict but "
                                 "another value in the checkpoint")
            return _replacing(container, key, self._object(index), path)
        shape = tuple(entry["shape"])
        if isinstance(leaf, FlatShard):
            if leaf.global_shape != shape:
                raise ValueError(f"Size mismatch between saved {shape} and current: "
                                 f"{leaf.global_shape} for {name}")
            values = self._slice(index, entry, leaf.offset, leaf.offset + leaf.length)
            return lambda: _fill(leaf.local, values, leaf.length)
        if isinstance(leaf, Tensor):
            if tuple(leaf.shape) != shape:
                raise ValueError(f"Size mismatch between saved {shape} and current: "
                                 f"{tuple(leaf.shape)} for {name}")
            values = self._slice(index, entry, 0, leaf.numel()).reshape(shape)
            return lambda: _fill(leaf, values)
        raise ValueError(f"{name} is a tensor in the checkpoint but a "
                         f"{type(leaf).__name__} in the state dict; pass a Tensor or "
                         "FlatShard to load it into")

    def _slice(self, index, entry, start, stop):
        """A buffer for elements [start, stop) of entry `index`'s flattened tensor, filled
        from the chunks that hold them when their files are read."""
        values = np.empty(stop - start, dtype=np.dtype(entry["dtype"]))
        for rank, offset, length in entry["chunks"]:
            low, high = max(start, offset), min(stop, offset + length)
            if low < high:
                def copy(arrays, objects, rank=rank, offset=offset, length=length, low=low,
                         high=high):
                    chunk = self._array(arrays, rank, index, length, values.dtype)
                    values[low - start:high - start] = chunk[low - offset:high - offset]
                self.copies[rank].append(copy)
        return values

    def _array(self, arrays, rank, index, length, dtype):
        array = arrays.get(index)
        if array is None or array.shape != (length,) or array.dtype != dtype:
            raise ValueError(f"{filesystem.shard_path(self.directory, rank)} does not hold "
                             f"entry {index} as its metadata says ({length} elements of "
                             f"{dtype}): the files do not belong together")
        return array

    def _object(self, index):
        """A box the saved value of entry `index` is put in when its file is read."""
        rank, box = self.metadata["entries"][index]["rank"], _Box()

        def copy(arrays, objects):
            if index not in objects:
                raise ValueError(f"{filesystem.shard_path(self.directory, rank)} lacks entry "
                                 f"{index} that its metadata lists: the files do not belong "
                                 "together")
            box.value = objects[index]
        self.copies[rank].append(copy)
        return box

    def _under(self, prefix):
        return [(i, entry) for i, entry in enumerate(self.metadata["entries"])
                if plans.key_of(entry["path"])[:len(prefix)] == prefix
                and len(entry["path"]) > len(prefix)]

    def _subtree(self, prefix):
        """The saved values below `prefix` as nested {(kind, key): value} (see `_rebuild`),
        with whole tensors."""
        root = {}
        for index, entry in self._under(prefix):
            steps = plans.key_of(entry["path"])[len(prefix):]
            if entry["kind"] == plans.OBJECT:
                value = self._object(index)
            else:
                shape = tuple(entry["shape"])
                values = self._slice(index, entry, 0, int(np.prod(shape, dtype=np.int64)))
                value = Tensor.wrap(values.reshape(shape))
            node = root
            for step in steps[:-1]:
                node = node.setdefault(step, {})
            node[steps[-1]] = value
        return root


class _Box:
    """A value read later: the writes unbox it."""
    __slots__ = ("value",)


def _rebuild(tree):
    """Nested {(kind, key): value} as the dicts, lists and tuples the kinds name."""
    if isinstance(tree, _Box):
        return tree.value
    if not isinstance(tree, dict):
        return tree
    kinds = {kind for kind, _ in tree}
    items = sorted(tree.items(), key=lambda item: item[0][1]) if kinds <= {"l", "t"} else \
        tree.items()
    built = {key: _rebuild(value) for (_, key), value in items}
    if kinds == {"l"}:
        return list(built.values())
    if kinds == {"t"}:
        return tuple(built.values())
    return built


def _is_empty_container(value):
    return isinstance(value, (dict, list)) and not value


def _replacing(container, key, value, path):
    """The write putting `value` (a box, or a tree of them) at `container[key]`, checked now
    so that it cannot fail."""
    if isinstance(container, tuple):
        raise TypeError(f"load() cannot replace {plans.text(path)}: it is in a tuple; make the "
                        "container a list")
    return lambda: _put(container, key, _rebuild(value))


def _put(container, key, value):
    if isinstance(value, list) and isinstance(container[key], list):
        container[key][:] = value  # the same list object stays in the user's state dict
    elif isinstance(value, dict) and isinstance(container[key], dict):
        container[key].clear()
        container[key].update(value)
    else:
        container[key] = value


def _fill(tensor, values, length=None):
    with tensor.writing() as array:
        if length is None:
            array[...] = values
        else:
            array[:length] = values
