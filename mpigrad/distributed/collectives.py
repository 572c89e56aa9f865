"""Collectives on Tensors and numpy arrays, with torch.distributed's names and semantics.

Tensors are reduced or received in place, in their own storage (`t._array`), which travels as an
MPI buffer. Ranks are global ranks; every collective takes `group=`. With `async_op=True` the
nonblocking MPI form is started and a `Work` (a Future) is returned; outputs are valid after
`work.wait()` (or once `work.is_completed()` is True), not before. Without it, the call
returns None once the outputs are valid.

Each call first validates its arguments and (unless MPIGRAD_CHECK_COLLECTIVES=0) checks
across ranks that all of them are making the same call: see `checks`. That check is a small
blocking Allreduce, so with it on even an `async_op=True` call waits at launch until every
rank of the group has reached it; the data itself then moves in the background.
"""
import numpy as np
from mpi4py import MPI

from ..autograd.profiler import record_function
from .fault import checks
from . import ring
from .buffers import array_of, arrays_of, expect_layout, mark_written, message, mpi_type
from .process_group import group_rank_of, member_group
from .reduce_ops import ReduceOp, finish, mpi_op, premultiplied
from .fault.watchdog import blocked
from .work import Work

_ALGORITHMS = ("mpi", "ring")


def _launch(pg, name, args, async_op, on_complete=None):
    """Run `pg.comm.<name>(*args)`, or start its nonblocking I-form and return a Work.
    `on_complete()` runs once the outputs are valid."""
    if async_op:
        start = getattr(pg.comm, "I" + name[0].lower() + name[1:])
        def done(statuses):
            if on_complete is not None:
                on_complete()
            return True  # torch's Work.wait() returns True
        return Work(pg, f"MPI {name}", [start(*args)], on_complete=done, keep_alive=args)
    with blocked(pg, f"MPI {name}"), record_function(f"mpi:{name}"):
        getattr(pg.comm, name)(*args)
    if on_complete is not None:
        on_complete()
    return None


def barrier(group=None, async_op=False):
    """Block until every rank of the group has called barrier."""
    pg = member_group(group, "barrier")
    if pg is None:
        return None
    with checks.collective(pg, "barrier"):
        pass
    return _launch(pg, "Barrier", (), async_op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False, *, algorithm="mpi"):
    """Reduce `tensor` across the group with `op`; every rank gets the result in place.

    `algorithm="mpi"` uses MPI's Allreduce; `algorithm="ring"` the chunked ring of
    point-to-point messages in `ring` (blocking only). All ranks must pick the same one.
    """
    pg = member_group(group, "all_reduce")
    if pg is None:
        return None
    with checks.collective(pg, "all_reduce") as check:
        arr = array_of(tensor, "tensor", writable=True)
        mpi = mpi_op(op, arr.dtype)
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")
        if algorithm == "ring" and async_op:
            raise ValueError("algorithm='ring' is blocking: it cannot be combined with "
                             "async_op=True (use the default algorithm='mpi')")
        check.tensor("tensor", arr)
        check.op(op)
        check.value("algorithm", _ALGORITHMS.index(algorithm), _ALGORITHMS.__getitem__)
    premultiplied(op, arr, in_place=True)

    def done():
        finish(op, arr, pg.size())
        mark_written(tensor)

    if algorithm == "ring":
        with blocked(pg, "the ring all_reduce"):
            ring.ring_all_reduce(arr, mpi, pg._internal_comm)
        done()
        return None
    return _launch(pg, "Allreduce", (MPI.IN_PLACE, message(arr), mpi), async_op, done)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` across the group into `dst`'s `tensor`; other ranks' are unchanged."""
    pg = member_group(group, "reduce")
    if pg is None:
        return None
    with checks.collective(pg, "reduce") as check:
        arr = array_of(tensor, "tensor", writable=True)
        root = group_rank_of(pg, dst, "dst")
        mpi = mpi_op(op, arr.dtype)
        check.tensor("tensor", arr)
        check.value("dst", dst)
        check.op(op)
    if pg.rank() != root:
        # A PREMUL_SUM scales a copy: the tensors of ranks other than dst stay unchanged.
        send = premultiplied(op, arr, in_place=False)
        return _launch(pg, "Reduce", (message(send), None, mpi, root), async_op)
    premultiplied(op, arr, in_place=True)

    def done():
        finish(op, arr, pg.size())
        mark_written(tensor)

    return _launch(pg, "Reduce", (MPI.IN_PLACE, message(arr), mpi, root), async_op, done)


def broadcast(tensor, src, group=None, async_op=False):
    """Copy `src`'s `tensor` into `tensor` on every other rank of the group."""
    pg = member_group(group, "broadcast")
    if pg is None:
        return None
    with checks.collective(pg, "broadcast") as check:
        arr = array_of(tensor, "tensor", writable=True)
        root = group_rank_of(pg, src, "src")
        check.tensor("tensor", arr)
        check.value("src", src)
    return _launch(pg, "Bcast", (message(arr), root), async_op, lambda: mark_written(tensor))


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fill `tensor_list[i]` with group rank i's `tensor`, on every rank."""
    pg = member_group(group, "all_gather")
    if pg is None:
        return None
    with checks.collective(pg, "all_gather") as check:
        arr = array_of(tensor, "tensor")
        outs = arrays_of(tensor_list, "tensor_list", pg.size(), writable=True)
        for i, out in enumerate(outs):
            expect_layout(out, f"tensor_list[{i}]", arr.shape, arr.dtype, "tensor")
        check.tensor("tensor", arr)
    staging = np.empty((pg.size(),) + arr.shape, arr.dtype)
    return _launch(pg, "Allgather", (message(arr), message(staging)), async_op,
                   lambda: _unstage(staging, outs, tensor_list))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Gather every rank's `input_tensor` into `output_tensor`, either concatenated along dim 0
    (shape (world_size * n, ...)) or stacked (shape (world_size, n, ...))."""
    pg = member_group(group, "all_gather_into_tensor")
    if pg is None:
        return None
    with checks.collective(pg, "all_gather_into_tensor") as check:
        inp = array_of(input_tensor, "input_tensor")
        out = array_of(output_tensor, "output_tensor", writable=True)
        _expect_stack_of(out, "output_tensor", inp, "input_tensor", pg.size())
        check.tensor("input_tensor", inp)
    own_slot = out.reshape(pg.size(), inp.size)[pg.rank()]
    if inp.size and inp.ctypes.data == own_slot.ctypes.data:
        send = MPI.IN_PLACE  # the input already sits in its slot of the output
    else:
        send = message(inp.copy() if np.may_share_memory(inp, out) else inp)
    return _launch(pg, "Allgather", (send, message(out)), async_op,
                   lambda: mark_written(output_tensor))


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """Collect every rank's `tensor` into `gather_list` (one tensor per rank) on `dst`.
    `gather_list` must be given on `dst` only."""
    pg = member_group(group, "gather")
    if pg is None:
        return None
    with checks.collective(pg, "gather") as check:
        arr = array_of(tensor, "tensor")
        root = group_rank_of(pg, dst, "dst")
        is_root = pg.rank() == root
        if is_root:
            if gather_list is None:
                raise ValueError(f"gather_list is required on the destination rank {dst}")
            outs = arrays_of(gather_list, "gather_list", pg.size(), writable=True)
            for i, out in enumerate(outs):
                expect_layout(out, f"gather_list[{i}]", arr.shape, arr.dtype, "tensor")
        elif gather_list:
            raise ValueError(f"gather_list must not be given on a rank other than dst={dst}")
        check.tensor("tensor", arr)
        check.value("dst", dst)
    if not is_root:
        return _launch(pg, "Gather", (message(arr), None, root), async_op)
    staging = np.empty((pg.size(),) + arr.shape, arr.dtype)
    return _launch(pg, "Gather", (message(arr), message(staging), root), async_op,
                   lambda: _unstage(staging, outs, gather_list))


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """Give group rank i `scatter_list[i]` from `src`, received into `tensor`.
    `scatter_list` must be given on `src` only."""
    pg = member_group(group, "scatter")
    if pg is None:
        return None
    with checks.collective(pg, "scatter") as check:
        arr = array_of(tensor, "tensor", writable=True)
        root = group_rank_of(pg, src, "src")
        staging = None
        if pg.rank() == root:
            if scatter_list is None:
                raise ValueError(f"scatter_list is required on the source rank {src}")
            ins = arrays_of(scatter_list, "scatter_list", pg.size())
            for i, item in enumerate(ins):
                expect_layout(item, f"scatter_list[{i}]", arr.shape, arr.dtype, "tensor")
            staging = message(np.stack(ins))
        elif scatter_list:
            raise ValueError(f"scatter_list must not be given on a rank other than src={src}")
        check.tensor("tensor", arr)
        check.value("src", src)
    return _launch(pg, "Scatter", (staging, message(arr), root), async_op,
                   lambda: mark_written(tensor))


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `input_list[i]` across the group with `op` into group rank i's `output`."""
    pg = member_group(group, "reduce_scatter")
    if pg is None:
        return None
    with checks.collective(pg, "reduce_scatter") as check:
        out = array_of(output, "output", writable=True)
        ins = arrays_of(input_list, "input_list", pg.size())
        for i, item in enumerate(ins):
            expect_layout(item, f"input_list[{i}]", out.shape, out.dtype, "output")
        mpi = mpi_op(op, out.dtype)
        check.tensor("output", out)
        check.op(op)
    return _reduce_scatter_block(pg, premultiplied(op, np.stack(ins), in_place=True), out,
                                 output, op, mpi, async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `input` across the group and give group rank i its i-th block in `output`.
    `input` is the blocks concatenated along dim 0 or stacked (see all_gather_into_tensor)."""
    pg = member_group(group, "reduce_scatter_tensor")
    if pg is None:
        return None
    with checks.collective(pg, "reduce_scatter_tensor") as check:
        out = array_of(output, "output", writable=True)
        inp = array_of(input, "input")
        _expect_stack_of(inp, "input", out, "output", pg.size())
        mpi = mpi_op(op, out.dtype)
        check.tensor("output", out)
        check.op(op)
    send = premultiplied(op, inp, in_place=False)
    if send is inp and np.may_share_memory(inp, out):
        send = inp.copy()
    return _reduce_scatter_block(pg, send, out, output, op, mpi, async_op)


def _reduce_scatter_block(pg, send, out, output, op, mpi, async_op):
    def done():
        finish(op, out, pg.size())
        mark_written(output)

    return _launch(pg, "Reduce_scatter_block", (message(send), message(out), mpi), async_op,
                   done)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Send `input_tensor_list[i]` to group rank i and receive group rank i's tensor for this
    rank into `output_tensor_list[i]`. Sizes may differ from pair to pair."""
    pg = member_group(group, "all_to_all")
    if pg is None:
        return None
    with checks.collective(pg, "all_to_all") as check:
        outs = arrays_of(output_tensor_list, "output_tensor_list", pg.size(), writable=True)
        ins = arrays_of(input_tensor_list, "input_tensor_list", pg.size())
        dtype = ins[0].dtype
        for name, items in (("input_tensor_list", ins), ("output_tensor_list", outs)):
            for i, item in enumerate(items):
                if item.dtype != dtype:
                    raise TypeError(f"{name}[{i}] has dtype {item.dtype}; all tensors of an "
                                    f"all_to_all must have one dtype (input_tensor_list[0] "
                                    f"has {dtype})")
        send_counts = [item.size for item in ins]
        recv_counts = [out.size for out in outs]
        check.dtype("tensors", dtype)
        check.pairwise(send_counts, recv_counts, "input_tensor_list[{peer}]",
                       "output_tensor_list[{peer}]")
    send = np.concatenate([item.reshape(-1) for item in ins])
    received = np.empty(sum(recv_counts), dtype)

    def done():
        for out, part in zip(outs, np.split(received, np.cumsum(recv_counts)[:-1])):
            out.reshape(-1)[:] = part
        mark_written(*output_tensor_list)

    return _launch(pg, "Alltoallv", (_counted(send, send_counts), _counted(received, recv_counts)),
                   async_op, done)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """all_to_all on one tensor split along dim 0: rows of `input` go to group rank i in
    blocks of `input_split_sizes[i]` rows (equal blocks when None), and rank i's block lands
    in `output` in blocks of `output_split_sizes[i]` rows."""
    pg = member_group(group, "all_to_all_single")
    if pg is None:
        return None
    with checks.collective(pg, "all_to_all_single") as check:
        out = array_of(output, "output", writable=True)
        inp = array_of(input, "input")
        if inp.ndim == 0 or out.ndim == 0:
            raise ValueError("all_to_all_single splits along dim 0: input and output must "
                             "have at least one dimension")
        if inp.shape[1:] != out.shape[1:] or inp.dtype != out.dtype:
            raise ValueError(f"input (shape {inp.shape}, {inp.dtype}) and output (shape "
                             f"{out.shape}, {out.dtype}) must have the same dtype and the same "
                             f"shape after dim 0")
        row = int(np.prod(inp.shape[1:], dtype=np.int64))
        send_counts = [n * row for n in _splits(input_split_sizes, inp, "input", pg.size())]
        recv_counts = [n * row for n in _splits(output_split_sizes, out, "output", pg.size())]
        check.dtype("input", inp.dtype)
        check.shape("input after dim 0", inp.shape[1:])
        check.pairwise(send_counts, recv_counts, "input split {peer}", "output split {peer}")
    send = inp.copy() if np.may_share_memory(inp, out) else inp
    return _launch(pg, "Alltoallv", (_counted(send, send_counts), _counted(out, recv_counts)),
                   async_op, lambda: mark_written(output))


def _splits(split_sizes, arr, name, size):
    if split_sizes is None:
        if arr.shape[0] % size:
            raise ValueError(f"{name} has {arr.shape[0]} rows, which do not split evenly "
                             f"over {size} ranks; pass {name}_split_sizes")
        return [arr.shape[0] // size] * size
    sizes = list(split_sizes)
    if len(sizes) != size or any(int(n) != n or n < 0 for n in sizes) or sum(sizes) != len(arr):
        raise ValueError(f"{name}_split_sizes must be {size} non-negative ints (one per rank) "
                         f"summing to {name}'s {arr.shape[0]} rows, got {split_sizes}")
    return [int(n) for n in sizes]


def _counted(arr, counts):
    """A vector-collective buffer: `arr` in consecutive pieces of `counts` elements."""
    displacements = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return [arr, (list(counts), displacements.tolist()), mpi_type(arr.dtype)]


def _expect_stack_of(whole, whole_name, part, part_name, size):
    stacked = (size,) + part.shape
    concatenated = (size * part.shape[0],) + part.shape[1:] if part.ndim else stacked
    if whole.dtype != part.dtype or whole.shape not in (stacked, concatenated):
        raise ValueError(f"{whole_name} has shape {whole.shape} and dtype {whole.dtype}; for "
                         f"{part_name} of shape {part.shape} and dtype {part.dtype} on "
                         f"{size} ranks it must have dtype {part.dtype} and shape "
                         f"{concatenated} (concatenated) or {stacked} (stacked)")


def _unstage(staging, outs, originals):
    for out, part in zip(outs, staging):
        out[...] = part
    mark_written(*originals)
