"""Collectives on picklable Python objects, for small metadata (names, configs, shapes).

Tensors should go through the buffer collectives instead: these pickle.
"""
from .fault import checks
from .process_group import group_rank_of, member_group
from .fault.watchdog import blocked


def all_gather_object(object_list, obj, group=None):
    """Fill `object_list[i]` (a list of world-size length) with group rank i's `obj`."""
    pg = member_group(group, "all_gather_object")
    if pg is None:
        return
    with checks.collective(pg, "all_gather_object"):
        _expect_list(object_list, "object_list", pg.size())
    with blocked(pg, "all_gather_object"):
        object_list[:] = pg.comm.allgather(obj)


def broadcast_object_list(object_list, src=0, group=None):
    """Replace the items of `object_list` with those of `src`'s list, on every rank. All ranks
    pass lists of the same length."""
    pg = member_group(group, "broadcast_object_list")
    if pg is None:
        return
    with checks.collective(pg, "broadcast_object_list") as check:
        root = group_rank_of(pg, src, "src")
        _expect_list(object_list, "object_list", None)
        check.value("src", src)
        check.value("len(object_list)", len(object_list))
    with blocked(pg, "broadcast_object_list"):
        object_list[:] = pg.comm.bcast(object_list if pg.rank() == root else None, root)


def _expect_list(value, name, length):
    if not isinstance(value, list):
        raise TypeError(f"{name} must be a list (it is filled in place), got "
                        f"{type(value).__name__}")
    if length is not None and len(value) != length:
        raise ValueError(f"{name} must have {length} items (one per rank of the group), "
                         f"got {len(value)}")
