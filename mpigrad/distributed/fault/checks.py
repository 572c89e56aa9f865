"""Cross-rank checks that every rank of a group is making the same collective call.

MPI does not compare calls across ranks: a rank that reduces float32 while another reduces
float64, or that calls broadcast while the others call all_reduce, gets garbage or a hang.
So, before a user-facing collective moves any data, each rank describes its call as a
fixed-length int64 vector: which collective, how many it has called on this group before,
whether its own arguments passed validation, then the fields that must agree (dtypes, shapes,
roots, the reduce op). One Allreduce(MAX) of [v, -v] gives every rank the elementwise maximum
and minimum; if they are equal everywhere, all ranks made the same call. If not, all ranks
(they all saw the same disagreement) Allgather the vectors and raise the same
CollectiveMismatchError naming the ranks and what differed. A rank whose own arguments were
bad raises its own error, and the others raise one naming it, instead of waiting for it.

A rank that never reaches the check at all (it is stuck in another collective, or called
this one on another group) is caught by the watchdog after the group's timeout.

Cost: one Allreduce of 512 bytes per collective, on a communicator of its own, plus about
10 us of Python: 10-20 us per call on 2 ranks of a 2-core machine, where a bare 4-byte MPI
Allreduce takes 2-4 us (jobs/bench/bench_allreduce.py measures it); all_to_all adds an Alltoall
and an Allgather of a few integers per rank to compare message sizes. Code that runs MPI
operations on `group.comm` itself (DistributedDataParallel's hot path) does not pay it.
Turn it off, for all ranks alike, with MPIGRAD_CHECK_COLLECTIVES=0; mismatched calls then
fail however MPI fails.
"""
import zlib

import numpy as np
from mpi4py import MPI

from ..buffers import SUPPORTED_DTYPES
from ..errors import CollectiveMismatchError
from ..reduce_ops import ReduceOp, kind
from .watchdog import before_call, blocked, interruptible

KINDS = (
    "barrier", "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
    "all_to_all_single", "all_gather_object", "broadcast_object_list", "new_group",
)
_SLOTS = 32
_KIND, _COUNT, _VALID = range(3)
# Dims beyond these are still compared, through a checksum of the whole shape.
_SHOWN_DIMS = 8
_OPS = list(ReduceOp)
_DTYPE_CODES = {dtype: code for code, dtype in enumerate(SUPPORTED_DTYPES)}


def collective(pg, kind):
    """Context manager around a collective's argument validation: record the fields that must
    agree inside it; on exit it compares them across `pg`'s ranks (when checks are on)."""
    before_call()  # a test scope's gate may move the group to fresh communicators
    return _Check(pg, kind) if pg.check_collectives else _NO_CHECK


class _Check:
    def __init__(self, pg, kind):
        self._pg = pg
        self._kind = kind
        self._values = [KINDS.index(kind), pg._collective_count, 1]
        self._fields = []
        self._pairs = None

    def dtype(self, label, dtype):
        self._add(f"dtype of {label}", [_DTYPE_CODES[dtype]],
                  lambda v: str(SUPPORTED_DTYPES[v[0]]))

    def shape(self, label, shape):
        shown = list(shape[:_SHOWN_DIMS])
        checksum = zlib.crc32(np.asarray(shape, np.int64).tobytes())
        self._add(f"shape of {label}",
                  [len(shape), *shown, *[0] * (_SHOWN_DIMS - len(shown)), checksum], _shape_text)

    def tensor(self, label, arr):
        self.dtype(label, arr.dtype)
        self.shape(label, arr.shape)

    def value(self, label, value, render=str):
        self._add(label, [value], lambda v: render(int(v[0])))

    def op(self, op):
        self._add("op", [_OPS.index(kind(op))], lambda v: f"ReduceOp.{_OPS[v[0]].name}")

    def pairwise(self, send_counts, recv_counts, send_what, recv_what):
        """For all-to-all: this rank sends send_counts[j] elements to group rank j and expects
        recv_counts[j] from it. `send_what`/`recv_what` name the arguments, with {peer}."""
        self._pairs = (np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64),
                       send_what, recv_what)

    def _add(self, label, values, render):
        start = len(self._values)
        self._values += values
        self._fields.append((label, slice(start, len(self._values)), render))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, Exception):
            return False  # KeyboardInterrupt and the like: leave at once, no communication
        self._values[_VALID] = int(exc is None)
        assert len(self._values) <= _SLOTS, f"{self._kind}: signature longer than {_SLOTS}"
        self._pg._collective_count += 1
        with blocked(self._pg, f"the check before {self._kind}"):
            problem = self._compare_signatures()
            # All ranks got the same answer above, so they agree on whether this stage runs.
            if problem is None and self._pairs is not None:
                problem = self._compare_pairs()
        if problem is not None and exc is None:
            raise CollectiveMismatchError(problem)
        return False

    def _compare_signatures(self):
        comm = self._pg._internal_comm
        signature = np.zeros(_SLOTS, np.int64)
        signature[:len(self._values)] = self._values
        bounds = np.concatenate((signature, -signature))
        # The one stage a rank can reach alone (the later ones follow its agreed answer).
        interruptible(lambda: comm.Allreduce(MPI.IN_PLACE, bounds, MPI.MAX),
                      lambda: comm.Iallreduce(MPI.IN_PLACE, bounds, MPI.MAX))
        if not (bounds[:_SLOTS] + bounds[_SLOTS:]).any():  # max == min everywhere
            return None
        rows = np.empty((comm.Get_size(), _SLOTS), np.int64)
        comm.Allgather(signature, rows)
        return self._describe(rows)

    def _describe(self, rows):
        lines = []
        rejected = [self._pg.ranks[i] for i in np.flatnonzero(rows[:, _VALID] == 0)]
        if rejected:
            lines.append(f"the arguments were rejected on {_ranks_text(rejected)} (that rank "
                         f"raised its own error saying why)")
        lines += self._differences(rows[:, _KIND:_KIND + 1], "collective", lambda v: KINDS[v[0]])
        lines += self._differences(rows[:, _COUNT:_COUNT + 1],
                                   "collectives called on this group before this one",
                                   lambda v: str(v[0]))
        if not rejected and len(set(rows[:, _KIND])) == 1:
            for label, columns, render in self._fields:
                lines += self._differences(rows[:, columns], label, render)
        return (f"ranks made different calls at collective #{self._values[_COUNT]} on "
                f"{self._pg.name} ({self._kind} on this rank), so nothing was sent:\n  "
                + "\n  ".join(lines))

    def _differences(self, columns, label, render):
        by_value = {}
        for group_rank, row in enumerate(columns):
            by_value.setdefault(tuple(int(v) for v in row), []).append(self._pg.ranks[group_rank])
        if len(by_value) == 1:
            return []
        return [f"{label}: " + "; ".join(f"{render(list(value))} on {_ranks_text(ranks)}"
                                         for value, ranks in by_value.items())]

    def _compare_pairs(self):
        sends, recvs, send_what, recv_what = self._pairs
        comm = self._pg._internal_comm
        incoming = np.empty_like(recvs)
        comm.Alltoall(sends, incoming)
        bad = np.flatnonzero(incoming != recvs)
        first = bad[0] if len(bad) else -1
        mine = np.array([len(bad), first, incoming[first], recvs[first]], np.int64)
        rows = np.empty((comm.Get_size(), 4), np.int64)
        comm.Allgather(mine, rows)
        if not rows[:, 0].any():
            return None
        ranks = self._pg.ranks
        lines = [f"rank {ranks[src]} sends {got} elements ({send_what.format(peer=dst)}) to "
                 f"rank {ranks[dst]}, which expects {expected} "
                 f"({recv_what.format(peer=src)})"
                 for dst, (count, src, got, expected) in enumerate(rows) if count]
        return (f"ranks disagree on message sizes in {self._kind} (collective "
                f"#{self._values[_COUNT]} on {self._pg.name}), so nothing was sent:\n  "
                + "\n  ".join(lines))


class _NoCheck:
    def _ignore(self, *args):
        pass

    dtype = shape = tensor = value = op = pairwise = _ignore

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


_NO_CHECK = _NoCheck()


def _shape_text(values):
    ndim, dims, checksum = values[0], values[1:1 + _SHOWN_DIMS], values[-1]
    if ndim > _SHOWN_DIMS:
        return f"({', '.join(map(str, dims))}, ...) [{ndim} dims, checksum {checksum:#010x}]"
    return str(tuple(dims[:ndim]))


def _ranks_text(ranks):
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
