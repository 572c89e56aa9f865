"""`assert_same_on_all_ranks`: a tensor, or a model's state, equal on every rank."""
from collections.abc import Mapping

import numpy as np

from ..dtypes import is_differentiable
from ..tensor import Tensor


def assert_same_on_all_ranks(tensor_or_state_dict, group=None):
    """Raise AssertionError, on every rank of `group` (the default group when None), unless
    every rank holds exactly the same values (same shapes and dtypes, NaN equal to NaN) as
    group rank 0: one tensor or array, or a mapping of them such as a `state_dict()`. The
    message names each rank that differs and, per entry, how many elements differ and by how
    much at most. Collective: every rank of the group must call it."""
    import mpigrad.distributed as dist  # not at the top: importing it may start MPI
    entries = _entries(tensor_or_state_dict)
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, entries, group=group)
    ranks = dist.get_process_group_ranks(group) if group is not None else \
        list(range(len(gathered)))
    reference = gathered[0]
    problems = []
    for rank, other in zip(ranks[1:], gathered[1:]):
        differences = [_difference(name, reference.get(name), other.get(name))
                       for name in sorted(set(reference) | set(other), key=str)]
        differences = [d for d in differences if d is not None]
        if differences:
            problems.append(f"rank {rank} differs from rank {ranks[0]}:\n    "
                            + "\n    ".join(differences))
    if problems:
        raise AssertionError(f"not the same on all {len(ranks)} ranks:\n  "
                             + "\n  ".join(problems))


def _entries(value):
    if isinstance(value, Mapping):
        return {name: _array(v, f"[{name!r}]") for name, v in value.items()}
    return {"": _array(value, "")}


def _array(value, where):
    if isinstance(value, Tensor):
        return np.array(value.detach()._array)
    if isinstance(value, (np.ndarray, np.number, int, float, bool)):
        return np.asarray(value)
    raise TypeError(f"assert_same_on_all_ranks: expected a tensor, an array or a mapping of "
                    f"them (a state_dict), got {type(value).__name__}{' at ' + where if where else ''}")


def _difference(name, mine, theirs):
    label = f"{name!r}: " if name != "" else ""
    if mine is None or theirs is None:
        return f"{label}{'missing' if theirs is None else 'only on this rank, not on rank 0'}"
    if mine.shape != theirs.shape or mine.dtype != theirs.dtype:
        return (f"{label}shape {theirs.shape} dtype {theirs.dtype}, against shape {mine.shape} "
                f"dtype {mine.dtype}")
    if is_differentiable(mine.dtype):
        same = (mine == theirs) | (np.isnan(mine) & np.isnan(theirs))
    else:
        same = mine == theirs
    if same.all():
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(theirs.astype(np.float64 if mine.dtype.kind != "c" else np.complex128)
                     - mine)[~same]
    return (f"{label}{int((~same).sum())} of {same.size} elements differ, by up to "
            f"{float(np.nanmax(gap)) if not np.isnan(gap).all() else float('nan'):g}")
