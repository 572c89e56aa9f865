"""ZeroRedundancyOptimizer: optimizer state sharded across ranks (ZeRO stage 1), as in
`torch.distributed.optim.ZeroRedundancyOptimizer`. With DDP's `reduce_to_owner_hook`
(algorithms/ddp_comm_hooks/ddp_zero_hook.py) gradients are sharded too (stage 2).

    opt = ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=1e-3)
    loss.backward()        # gradients averaged by DDP, on every rank as usual
    opt.step()             # each rank updates its shard, then the shards are broadcast

Every rank holds every parameter, but each parameter is *owned* by one rank, and only its
owner keeps optimizer state for it (Adam's two moments, SGD's momentum) and steps it: a local
`optimizer_class` over the owned parameters does that. After the local step each owner
broadcasts its updated parameters, so all ranks again hold the same model.

Partition (PyTorch's rule, so a partition can be compared across the two): parameter groups
in order; inside a group the parameters sorted by size, largest first (ties keep their
order); each goes to the rank whose total so far is smallest (the lowest such rank). Totals
carry over from one group to the next. Each rank's local optimizer gets one group per
exposed group (empty when it owns nothing in it), with the same hyper-parameters: changing
`param_groups[i]["lr"]` (a scheduler) reaches the local optimizer at the next step.

State dicts are PyTorch's: `consolidate_state_dict(to)` (collective) gathers every shard's
state on rank `to` of the group, where `state_dict()` then returns an ordinary optimizer state
dict numbered over all parameters, loadable into a ZeroRedundancyOptimizer of any world size
(each rank keeps the entries it owns) or into the plain optimizer.
"""
import weakref

import numpy as np
from mpi4py import MPI

from ...optim.optimizer import Optimizer
from ...tensor import Tensor
from ..process_group import Communicators, _get_default_group, _live, duplicate, free_released
from ..fault.watchdog import blocked

__all__ = ["ZeroRedundancyOptimizer"]


class ZeroRedundancyOptimizer(Optimizer):
    """Wraps `optimizer_class(owned parameters, **defaults)` on each rank of `process_group`
    (the default group when None).

    parameters_as_bucket_view  keep each rank's parameters as views into one flat array per
                               rank, so the post-step broadcast is one message per rank
                               instead of one per parameter (all parameters must then share
                               a dtype; `param._array` is rebound to the view once, here).
    overlap_with_ddp           PyTorch runs the step inside DDP's communication hook; not
                               supported here (a ValueError says so).
    """

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            raise ValueError("ZeroRedundancyOptimizer(overlap_with_ddp=True) is not supported by "
                             "mpigrad; construct it with overlap_with_ddp=False and call step() "
                             "after backward")
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError(f"optimizer_class must be an mpigrad.optim.Optimizer subclass such "
                            f"as optim.SGD, got {optimizer_class!r}")
        self._local = None
        super().__init__(params, defaults)
        pg = _get_default_group("ZeroRedundancyOptimizer") if process_group is None \
            else _live(process_group, "ZeroRedundancyOptimizer")
        self.process_group = pg
        # A communicator of its own, so the broadcasts never match DDP's or the user's traffic;
        # released when the optimizer is collected, freed at an agreement of the group's.
        with blocked(pg, "ZeroRedundancyOptimizer: duplicating the group's communicator"):
            free_released(pg)
            self._comm = duplicate(pg.comm, "ZeroRedundancyOptimizer")
        weakref.finalize(self, Communicators(pg, [self._comm]).release)
        self.rank = self._comm.Get_rank()
        self.world_size = self._comm.Get_size()
        self.optimizer_class = optimizer_class
        self.parameters_as_bucket_view = parameters_as_bucket_view
        self._all_state_dicts = None
        # Set by ddp_comm_hooks.ddp_zero_hook (ZeRO-2): only owners then hold true gradients.
        self._drop_foreign_gradients = False
        self._repartition()
        self.optim = optimizer_class(self._partition_parameters()[self.rank], **defaults)
        self._local = self.optim
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        if parameters_as_bucket_view:
            self._build_param_buckets()

    # ------------------------------------------------------------------ partition
    def _repartition(self):
        self._partition_cache = None
        self._param_to_rank = {}
        for r, groups in enumerate(self._partition_parameters()):
            for group in groups:
                for p in group["params"]:
                    self._param_to_rank[id(p)] = r

    def _partition_parameters(self):
        """Per rank, the parameter groups it owns (PyTorch's greedy rule; see the module
        docstring). Computed once per layout and cached."""
        if self._partition_cache is None:
            per_rank = [[] for _ in range(self.world_size)]
            totals = [0] * self.world_size
            for group in self.param_groups:
                owned = [[] for _ in range(self.world_size)]
                for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                    r = totals.index(min(totals))
                    owned[r].append(p)
                    totals[r] += p.numel()
                for r in range(self.world_size):
                    per_rank[r].append({**group, "params": owned[r]})
            self._partition_cache = per_rank
        return self._partition_cache

    def owner_of(self, param):
        """The group rank that owns `param`."""
        try:
            return self._param_to_rank[id(param)]
        except KeyError:
            raise ValueError(f"a parameter of shape {tuple(param.shape)} is not optimized by "
                             f"this ZeroRedundancyOptimizer") from None

    def add_param_group(self, param_group):
        """Add a group; its parameters are partitioned after the existing ones (whose owners
        do not change), and this rank's share joins the local optimizer."""
        super().add_param_group(param_group)
        if self._local is not None:
            self._repartition()
            self.optim.add_param_group(self._partition_parameters()[self.rank][-1])
            if self.parameters_as_bucket_view:
                self._build_param_buckets()

    def _build_param_buckets(self):
        """Move each rank's parameters into one flat array per rank (views keep the data)."""
        params = [p for g in self.param_groups for p in g["params"]]
        dtypes = {p._array.dtype for p in params}
        if len(dtypes) != 1:
            raise TypeError(f"parameters_as_bucket_view=True needs parameters of one dtype, "
                            f"got {sorted(map(str, dtypes))}")
        dtype = dtypes.pop()
        self._buckets = []
        for groups in self._partition_parameters():
            owned = [p for g in groups for p in g["params"]]
            flat = np.empty(sum(p.numel() for p in owned), dtype)
            offset = 0
            for p in owned:
                view = flat[offset:offset + p.numel()].reshape(p.shape)
                np.copyto(view, p._array)
                p._array = view
                offset += p.numel()
            self._buckets.append(flat)

    # ------------------------------------------------------------------ step
    def step(self, closure=None):
        """Step this rank's shard with the local optimizer, then broadcast every shard from
        its owner. Returns the closure's loss, if a closure was given."""
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        loss = self.optim.step(closure)
        self._sync_params()
        if self._drop_foreign_gradients:
            for g in self.param_groups:
                for p in g["params"]:
                    if self.owner_of(p) != self.rank:
                        p.grad = None
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        return loss

    def _sync_params(self):
        if self.world_size == 1:
            return
        if self.parameters_as_bucket_view:
            messages = [(flat, r) for r, flat in enumerate(self._buckets)]
        else:
            messages = [(p._array, r) for r, groups in enumerate(self._partition_parameters())
                        for g in groups for p in g["params"]]
        requests = [self._comm.Ibcast(_contiguous(array), root=r) for array, r in messages]
        with blocked(self.process_group, "ZeroRedundancyOptimizer's parameter broadcast"):
            MPI.Request.Waitall(requests)
        for g in self.param_groups:
            for p in g["params"]:
                p.mark_written()

    # ------------------------------------------------------------------ state dicts
    def _global_index(self):
        """Parameter -> index in the exposed groups, numbered as Optimizer.state_dict does."""
        return {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    def consolidate_state_dict(self, to=0):
        """Gather every rank's shard of optimizer state on group rank `to` (collective: every
        rank calls it). The arrays travel as one buffer per rank; only their layout is
        pickled."""
        if not (isinstance(to, (int, np.integer)) and 0 <= to < self.world_size):
            raise ValueError(f"to must be a rank of the group, in [0, {self.world_size}), "
                             f"got {to!r}")
        index = self._global_index()
        layout, arrays = {}, []
        for p, values in self.optim.state.items():
            entry = {}
            for key, value in values.items():
                if isinstance(value, Tensor):
                    entry[key] = ("tensor", value._array.shape, value._array.dtype.str)
                    arrays.append(np.ascontiguousarray(value._array).view(np.uint8).reshape(-1))
                else:
                    entry[key] = ("value", value)
            layout[index[id(p)]] = entry
        payload = np.concatenate(arrays) if arrays else np.empty(0, np.uint8)
        layouts = self._comm.gather(layout, root=to)
        counts = self._comm.gather(payload.size, root=to)
        if self.rank != to:
            self._comm.Gatherv([payload, MPI.BYTE], None, root=to)
            self._all_state_dicts = None
            return
        received = np.empty(sum(counts), np.uint8)
        self._comm.Gatherv([payload, MPI.BYTE], [received, counts, MPI.BYTE], root=to)
        state, offset = {}, 0
        for shard in layouts:  # rank order; each rank's arrays are in its layout's order
            for i, entry in shard.items():
                values = {}
                for key, (kind, *rest) in entry.items():
                    if kind == "value":
                        values[key] = rest[0]
                        continue
                    shape, dtype = rest[0], np.dtype(rest[1])
                    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                    array = received[offset:offset + nbytes].view(dtype).reshape(shape).copy()
                    values[key] = Tensor.wrap(array)
                    offset += nbytes
                state[i] = values
        self._all_state_dicts = state

    def state_dict(self):
        """The whole optimizer's state dict; only on the rank given to the last
        `consolidate_state_dict`, as in PyTorch."""
        if self._all_state_dicts is None:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Call "
                               "consolidate_state_dict(to=...) on all ranks first, then "
                               "state_dict() on rank `to`")
        packed = super().state_dict()  # exposed hyper-parameters and global numbering
        packed["state"] = dict(sorted(self._all_state_dicts.items()))
        return packed

    def load_state_dict(self, state_dict):
        """Load a whole state dict (from any world size, or from the plain optimizer): each
        rank keeps the entries of the parameters it owns."""
        if not isinstance(state_dict, dict) or state_dict.keys() != {"state", "param_groups"}:
            raise ValueError("expected an optimizer state dict with keys 'state' and "
                             "'param_groups' (from state_dict() after consolidate_state_dict)")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
                len(s["params"]) != len(g["params"])
                for s, g in zip(saved_groups, self.param_groups)):
            raise ValueError(f"loaded state dict has parameter groups of sizes "
                             f"{[len(s['params']) for s in saved_groups]}, this optimizer "
                             f"{[len(g['params']) for g in self.param_groups]}")
        params = [p for g in self.param_groups for p in g["params"]]
        local_index = {id(p): i for i, p in
                       enumerate(p for g in self.optim.param_groups for p in g["params"])}
        local_state = {}
        for i, values in state_dict["state"].items():
            if not (isinstance(i, (int, np.integer)) and 0 <= i < len(params)):
                raise ValueError(f"loaded state refers to parameter {i!r}, but the optimizer "
                                 f"has parameters 0 to {len(params) - 1}")
            if id(params[i]) in local_index:
                local_state[local_index[id(params[i])]] = values
        first = 0
        local_groups = []
        for saved, group in zip(saved_groups, self.optim.param_groups):
            n = len(group["params"])
            local_groups.append({**saved, "params": list(range(first, first + n))})
            first += n
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)


def _copy_hyperparameters(source_groups, target_groups):
    for source, target in zip(source_groups, target_groups):
        target.update({k: v for k, v in source.items() if k != "params"})


def _contiguous(array):
    if not array.flags.c_contiguous:
        raise ValueError("ZeroRedundancyOptimizer broadcasts parameters in place: every "
                         "parameter's data must be a C-contiguous array")
    return array
