"""What a save writes and a load reads: state dicts flattened into entries, each rank's plan,
and the checks that the ranks' plans fit together (torch's planner, reduced to module
boundaries of a state dict).

A path names a leaf of the nested state dict: a tuple of steps `(kind, key)`, kind "d" for a
dict key (str or int), "l" for a list index, "t" for a tuple index. Dicts are always walked
into (an empty one is a leaf), lists and tuples only when they hold a tensor somewhere (as
torch's DCP does: `betas=(0.9, 0.999)` stays one value).
"""
import numpy as np

from ...tensor import Tensor
from .flat_shard import FlatShard

TENSOR, OBJECT = "tensor", "object"


def flatten(state_dict):
    """[(path, leaf, container, key)] of `state_dict` in order: `container[key]` is the leaf."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"a state dict must be a dict, got {type(state_dict).__name__}")
    leaves = []
    _walk(state_dict, (), leaves)
    return leaves


def _walk(container, path, leaves):
    items = container.items() if isinstance(container, dict) else enumerate(container)
    kind = "d" if isinstance(container, dict) else "t" if isinstance(container, tuple) else "l"
    for key, value in items:
        if isinstance(container, dict) and not isinstance(key, (str, int)):
            raise TypeError(f"state dict keys must be str or int, but {text(path)} has "
                            f"{type(key).__name__} key {key!r}")
        step = path + ((kind, key),)
        if (isinstance(value, dict) and value) or (
                isinstance(value, (list, tuple)) and _holds_tensor(value)):
            _walk(value, step, leaves)
        else:
            leaves.append((step, value, container, key))


def _holds_tensor(value):
    if isinstance(value, (Tensor, FlatShard)):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return False


def text(path):
    """A path as torch writes a fully qualified name: `optim.state.0.exp_avg`."""
    return ".".join(str(key) for _, key in path) or "<the state dict>"


def local_plan(leaves):
    """This rank's description of what it holds: per leaf, a tensor's global shape, dtype and
    the flat range it has (`offset`, `length`), or that it is another value."""
    plan = []
    for path, leaf, _, _ in leaves:
        item = {"path": [list(step) for step in path]}
        if isinstance(leaf, FlatShard):
            item.update(kind=TENSOR, shape=list(leaf.global_shape), dtype=leaf.dtype.str,
                        offset=leaf.offset, length=leaf.length, sharded=True)
        elif isinstance(leaf, Tensor):
            item.update(kind=TENSOR, shape=list(leaf.shape), dtype=leaf.dtype.str, offset=0,
                        length=leaf.numel(), sharded=False)
        else:
            item.update(kind=OBJECT)
        plan.append(item)
    return plan


def global_entries(plans):
    """The checkpoint's entries from every rank's `local_plan` (a list by rank). Ranks may hold
    different entries (pipeline stages each hold their own); an entry several ranks hold is
    one tensor or value: a tensor's chunks are `[rank, offset, length]` (a plain, replicated
    tensor is written by the lowest rank holding it, as is any other value). Raises
    ValueError, the same on every rank, if the ranks' entries do not fit together."""
    holders = {}  # key -> [(rank, item)], keys in the order ranks list them
    for rank, plan in enumerate(plans):
        for item in plan:
            holders.setdefault(key_of(item["path"]), []).append((rank, item))
    return [_entry(key, held) for key, held in holders.items()]


def _entry(key, held):
    first_rank, first = held[0]
    kinds = {(item["kind"], item.get("sharded")) for _, item in held}
    if len(kinds) > 1:
        raise ValueError(f"{text(key)} is a FlatShard on some ranks and a plain tensor or "
                         "another value on others: "
                         f"{', '.join(f'rank {r}: {_kind_text(item)}' for r, item in held)}")
    if first["kind"] == OBJECT:
        return {"path": first["path"], "kind": OBJECT, "rank": first_rank}
    for rank, item in held:
        if (item["shape"], item["dtype"]) != (first["shape"], first["dtype"]):
            raise ValueError(f"{text(key)} has shape {tuple(item['shape'])} and dtype "
                             f"{np.dtype(item['dtype'])} on rank {rank} but "
                             f"{tuple(first['shape'])} and {np.dtype(first['dtype'])} on rank "
                             f"{first_rank}")
    numel = int(np.prod(first["shape"], dtype=np.int64))
    if first["sharded"]:
        chunks = sorted([item["offset"], rank, item["length"]]
                        for rank, item in held if item["length"] > 0)
        _check_tiling(key, chunks, numel)
        chunks = [[rank, offset, length] for offset, rank, length in chunks]
    else:
        chunks = [[first_rank, 0, numel]] if numel else []
    return {"path": first["path"], "kind": TENSOR, "shape": first["shape"],
            "dtype": first["dtype"], "chunks": chunks}


def _check_tiling(key, chunks, numel):
    """The ranks' slices must cover the flattened tensor exactly once."""
    end = 0
    for offset, rank, length in chunks:
        if offset > end:
            raise ValueError(f"{text(key)}: no rank holds elements [{end}, {offset}) of its "
                             f"{numel}")
        if offset < end:
            raise ValueError(f"{text(key)}: rank {rank}'s FlatShard starts at {offset}, inside "
                             f"another rank's slice (which ends at {end}); slices must not "
                             "overlap")
        end = offset + length
    if end != numel:
        raise ValueError(f"{text(key)}: no rank holds elements [{end}, {numel}) of its {numel}")


def _kind_text(item):
    if item["kind"] == OBJECT:
        return "value"
    return "FlatShard" if item["sharded"] else "Tensor"


def key_of(path):
    """A path (lists from JSON or tuples) as a hashable tuple of (kind, key) steps."""
    return tuple((kind, key) for kind, key in path)

