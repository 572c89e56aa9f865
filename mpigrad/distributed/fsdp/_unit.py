"""`Unit`: the parameters one `fully_shard` call manages, sharded over a group (torch's
FSDPParamGroup).

Layout. Each parameter is flattened and split into `size` chunks of `chunk = ceil(numel /
size)` elements (the last ones padded with zeros): rank r keeps elements [r*chunk,
min((r+1)*chunk, numel)) as its shard, a 1-d Parameter that may be shorter than `chunk`, or
empty. The module's attributes hold the shards between uses, so `module.parameters()` and any
optimizer built on it see (and step) shards only.

Unshard. The unit's chunks travel in one message: each rank packs its shards, padded, into a
row of `columns = sum(chunk)` elements, one Iallgather fills a (size, columns) array, and each
parameter's full value is cut from its column block into an array of its own. The full
values live in persistent unsharded Parameters (one per parameter, the leaves the forward's
graph records); while the unit is sharded their `_array` is a zero-stride placeholder of the
right shape that holds no memory, so the graph keeps no full parameter alive, and the next
gather gives them new arrays before their backward runs.

Reduce. After backward, each unsharded gradient is packed the same way (a (size, columns)
array, row r holding chunk r of every gradient) and one Ireduce_scatter_block sums row r onto
rank r; over a 2-d mesh (HSDP) an Iallreduce over the replicate group follows. The sum,
divided by the data-parallel world, is added into the shards' `.grad`.

Mixed precision: the shards are packed in `param_dtype` (the gather and the forward run in
it), gradients are reduced in `reduce_dtype` and stored in the shards' dtype.
"""
import math

import numpy as np

from ...dtypes import bfloat16
from ...nn.parameter import Parameter
from ...tensor import Tensor
from ..buffers import float16_sum_supported
from ._norm import ShardParameter

__all__ = ["Unit", "ManagedParam"]


class ManagedParam:
    """One parameter of a unit: where it is registered, its layout, its shard and its
    unsharded tensor."""
    __slots__ = ("fqn", "slots", "shape", "numel", "chunk", "column", "offset", "length",
                 "requires_grad", "shard", "full", "grad_ready")

    def __init__(self, fqn, slots, param, comm, column, full_dtype):
        rank, size = comm.rank, comm.size
        self.fqn = fqn
        self.slots = slots               # [(module, attribute name)], several when tied
        self.shape = tuple(param.shape)
        self.numel = int(param._array.size)
        self.chunk = math.ceil(self.numel / size)
        self.column = column             # where this parameter's chunk sits in a row
        self.offset = min(rank * self.chunk, self.numel)
        self.length = min(self.chunk, self.numel - self.offset)
        self.requires_grad = param.requires_grad
        flat = param._array.reshape(-1)
        self.shard = ShardParameter(flat[self.offset:self.offset + self.length].copy(),
                                    param.requires_grad, comm)
        self.full = Parameter(_placeholder(self.shape, full_dtype),
                              requires_grad=param.requires_grad)
        self.grad_ready = False

    def use(self, tensor):
        for module, name in self.slots:
            module._parameters[name] = tensor


def _placeholder(shape, dtype):
    """A read-only array of `shape` that takes no memory: a sharded unit's full parameters."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def pack_rows(flat, rows, numel, chunk):
    """Write the flat array `flat` (numel elements) into `rows` (size x chunk), chunk r in row
    r, padding with zeros."""
    whole, rest = divmod(numel, chunk) if chunk else (0, 0)
    rows[:whole] = flat[:whole * chunk].reshape(whole, chunk)
    if whole < rows.shape[0]:
        rows[whole, :rest] = flat[whole * chunk:]
        rows[whole, rest:] = 0
        rows[whole + 1:] = 0


def unpack_rows(rows, out, numel, chunk):
    """The inverse of pack_rows: the first `numel` elements of the rows, into flat `out`."""
    whole, rest = divmod(numel, chunk) if chunk else (0, 0)
    out[:whole * chunk].reshape(whole, chunk)[...] = rows[:whole]
    if rest:
        out[whole * chunk:] = rows[whole, :rest]


class Unit:
    """The parameters `fully_shard(module)` manages (see the module docstring).

    `comm` is the ShardComm of the shard group, `replicate` that of the replicate group (a
    2-d mesh: HSDP) or None; `world` is the data-parallel size gradients are averaged over."""

    def __init__(self, name, params, comm, replicate, param_dtype, reduce_dtype):
        self.name = name
        self.comm = comm
        self.replicate = replicate
        self.size = comm.size
        self.world = comm.size * (replicate.size if replicate is not None else 1)
        dtypes = {p._array.dtype for _, _, p in params}
        if len(dtypes) != 1:
            raise TypeError(f"fully_shard({name}): its parameters have dtypes "
                            f"{sorted(map(str, dtypes))}; the parameters one call shards "
                            f"must share a dtype (shard the submodules separately)")
        self.dtype = dtypes.pop()
        self.param_dtype = np.dtype(param_dtype) if param_dtype is not None else self.dtype
        self.reduce_dtype = np.dtype(reduce_dtype) if reduce_dtype is not None \
            else self.param_dtype
        if self.reduce_dtype == np.float16 and not float16_sum_supported():
            raise TypeError(f"fully_shard({name}): this MPI cannot sum float16 gradients; "
                            f"pass MixedPrecisionPolicy(reduce_dtype=float32)")
        if self.reduce_dtype == bfloat16:
            raise TypeError(f"fully_shard({name}): MPI cannot sum bfloat16 gradients (it has "
                            f"no bfloat16 type); pass MixedPrecisionPolicy(param_dtype="
                            f"bfloat16, reduce_dtype=float32)")
        self.params = []
        column = 0
        for fqn, slots, param in params:
            managed = ManagedParam(fqn, slots, param, comm, column, self.param_dtype)
            column += managed.chunk
            self.params.append(managed)
            managed.use(managed.shard)
        self.columns = column
        self.trainable = [p for p in self.params if p.requires_grad]
        self.unsharded = False
        self._gather = None      # the all-gather in flight: (Work, rows)
        self._reduce = None      # the reduce-scatter in flight: (Work, result, stage)

    def __repr__(self):
        return f"<FSDP unit {self.name}: {len(self.params)} parameters>"

    # ------------------------------------------------------------------ unshard / reshard
    def start_unshard(self):
        """Issue the all-gather of the full parameters (nonblocking), unless unsharded or
        already in flight."""
        if self.unsharded or self._gather is not None:
            return
        send = self._row([p.shard._array for p in self.params], self.param_dtype)
        rows = np.empty((self.size, self.columns), self.param_dtype)
        self._gather = (self.comm.all_gather(send, rows, "all-gather of the parameters of "
                                             f"{self.name}"), rows)

    def wait_unshard(self):
        """Finish the all-gather (started now if it was not) and give the unsharded
        Parameters their values."""
        if self.unsharded:
            return
        self.start_unshard()
        work, rows = self._gather
        work.wait()
        self._gather = None
        for p, full in zip(self.params, self._cut(rows)):
            p.full._array = full
        self.unsharded = True

    def _row(self, pieces, dtype):
        """This rank's row of a gather: its pieces (one per parameter) at their columns, the
        padding zero."""
        row = np.zeros(self.columns, dtype)
        for p, piece in zip(self.params, pieces):
            row[p.column:p.column + p.length] = piece.reshape(-1)
        return row

    def _cut(self, rows):
        """Each parameter's full array, cut from gathered rows (size x columns)."""
        fulls = []
        for p in self.params:
            full = np.empty(p.numel, rows.dtype)
            unpack_rows(rows[:, p.column:p.column + p.chunk], full, p.numel, p.chunk)
            fulls.append(full.reshape(p.shape))
        return fulls

    def unshard(self):
        self.start_unshard()
        self.wait_unshard()

    def reshard(self):
        """Drop the full parameters' memory (their gradients are not touched)."""
        if self._gather is not None:  # a prefetch nobody used: complete it, keep nothing
            self._gather[0].wait()
            self._gather = None
        for p in self.params:
            p.full._array = _placeholder(p.shape, self.param_dtype)
        self.unsharded = False

    def write_back(self):
        """Copy this rank's piece of each full parameter into its shard (after the user
        changed the full values)."""
        for p in self.params:
            with p.shard.writing() as shard:
                shard[...] = p.full._array.reshape(-1)[p.offset:p.offset + p.length]

    def abandon(self):
        """Forget the gather and reduction in flight and the gathered parameters and
        unsharded gradients, waiting for nothing; returns the Works still in flight (the
        caller keeps them, and their buffers, until MPI completes them)."""
        works = [w for w in (self._gather and self._gather[0], self._reduce and self._reduce[0])
                 if w is not None]
        self._gather = self._reduce = None
        for p in self.params:
            p.full._array = _placeholder(p.shape, self.param_dtype)
            p.full.grad = None
        self.unsharded = False
        return works

    def use_full(self):
        for p in self.params:
            p.use(p.full)

    def use_shards(self):
        for p in self.params:
            p.use(p.shard)

    def gather_full(self, pieces, dtype, what):
        """The full arrays of which `pieces` (one per parameter, in order) are this rank's
        shards, laid out like the parameters (the optimizer's state is): blocking, for the
        full state dicts."""
        send = self._row(pieces, dtype)
        rows = np.empty((self.size, self.columns), dtype)
        self.comm.all_gather(send, rows, f"{what} of {self.name}").wait()
        return self._cut(rows)

    # ------------------------------------------------------------------ gradients
    def all_grads_ready(self):
        return all(p.grad_ready for p in self.trainable)

    def start_reduce(self):
        """Pack the unsharded gradients (zeros where a parameter got none) and start their
        reduce-scatter; the unsharded gradients are dropped."""
        send = np.empty((self.size, self.columns), self.reduce_dtype)
        for p in self.params:
            block = send[:, p.column:p.column + p.chunk]
            grad = p.full.grad
            if grad is None or not p.requires_grad:
                block[...] = 0
            else:
                pack_rows(grad._array.reshape(-1), block, p.numel, p.chunk)
            p.full.grad = None
        result = np.empty(self.columns, self.reduce_dtype)
        self._reduce = [self.comm.reduce_scatter(send, result, "reduce-scatter of the "
                                                 f"gradients of {self.name}"), result, False]

    def progress(self):
        """Let MPI move the reduction (over HSDP, start the replicate all-reduce once the
        reduce-scatter is done); once it is complete, add it into `.grad` and return True."""
        if self._reduce is None:
            return True
        if not self._reduce[0].done():
            return False
        if self.replicate is not None and not self._reduce[2]:
            self._start_replicate()
            return False
        self.finish_reduce()
        return True

    def _start_replicate(self):
        work, result, _ = self._reduce
        work.wait()
        self._reduce = [self.replicate.all_reduce(result, "all-reduce across replicas of "
                                                  f"the gradient shards of {self.name}"),
                        result, True]

    def finish_reduce(self):
        """Wait for the reduction and add the averaged shard gradients into `.grad`."""
        if self._reduce is None:
            return
        if self.replicate is not None and not self._reduce[2]:
            self._start_replicate()
        work, result, _ = self._reduce
        work.wait()
        self._reduce = None
        result /= self.world
        for p in self.trainable:
            piece = result[p.column:p.column + p.length].astype(self.dtype)
            if p.shard.grad is None:
                p.shard.grad = Tensor.wrap(piece)
            else:
                with p.shard.grad.writing() as grad:
                    grad += piece
