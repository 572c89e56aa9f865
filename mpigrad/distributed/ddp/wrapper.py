"""DistributedDataParallel: a thin Module wrapper; the Reducer (reducer.py) does the work.

    model = DistributedDataParallel(MyNet())   # same model built on every rank
    loss = loss_fn(model(x_local), y_local)     # each rank its own slice of the batch
    loss.backward()                             # gradients are averaged across ranks here
    opt.step()                                  # every rank takes the same step

Construction checks that every rank has the same parameters (count, shapes, dtypes) and
buffers, raising the same error on every rank naming the first difference, then broadcasts
parameters and buffers from rank 0. Each forward re-broadcasts buffers from rank 0
(`broadcast_buffers=True`) and arms the reducer for the backward that follows, unless inside
`no_sync()`.

DDP runs its MPI traffic through a `Channel` (channel.py) on the process group:
communicators of its own (duplicates of the group's), so it never matches the user's
collectives, and every blocking wait under the group's watchdog (its timeout is
init_process_group's `timeout`). DDP is a `Joinable` for `algorithms.join.Join`, and its
default comm hook is `algorithms.ddp_comm_hooks.default_hooks.hierarchical_allreduce_hook`
with a state made here. Where ranks share hosts (the same number on each host), the buckets
live in memory each host's ranks share and that hook sums them there, and across hosts slice
by slice (`algorithms.ddp_comm_hooks.shared_memory`); `.grad` is then a view of the rank's
buckets after backward, as with gradient_as_bucket_view. Otherwise it makes one Iallreduce
per bucket, or goes hierarchical where that pays.
"""
import contextlib
import os
import zlib

import numpy as np

from ...autograd import grad_mode
from ...device import device
from ...nn.module import Module
from ..algorithms.ddp_comm_hooks.default_hooks import (HierarchicalState,
                                                     hierarchical_allreduce_hook)
from ..algorithms.ddp_comm_hooks.hierarchical import host_names
from ..algorithms.ddp_comm_hooks.shared_memory import SharedBuckets
from ..algorithms.join import JoinHook, Joinable, notify_join_context
from ..process_group import _get_default_group
from .channel import Channel
from .reducer import Reducer
from .timeline import ENV as TIMELINE_ENV
from .timeline import Timeline, timeline_path

__all__ = ["DistributedDataParallel"]


def _refuse_sparse_gradients(module):
    """torch's DDP gives each parameter of an Embedding(sparse=True) a bucket of its own and
    sums its sparse gradients with an allgather of indices and values (on Gloo). mpigrad's
    buckets are dense: rather than fail inside the first backward, say so at construction,
    on every rank alike (the model is the same on all of them)."""
    for name, child in module.named_modules():
        if getattr(child, "sparse", False) is True:
            weight = f"{name}.weight" if name else "weight"
            raise NotImplementedError(
                f"DistributedDataParallel: parameter '{weight}' gets sparse gradients "
                f"({type(child).__name__}(sparse=True)), which mpigrad's DDP does not reduce; "
                f"build it with sparse=False (a dense gradient, reduced like the others) or "
                f"train that module outside DDP")


def _check_cpu_placement(device_ids, output_device, dim):
    """torch's rule for a CPU module: no device ids, no output device (the CPU is fine)."""
    ids = list(device_ids) if device_ids is not None else []
    if not all(_is_cpu(d) for d in ids) or (output_device is not None
                                            and not _is_cpu(output_device)):
        raise ValueError("DistributedDataParallel device_ids and output_device arguments only "
                         "work with single-device/multiple-device GPU modules or CPU modules, "
                         f"but got device_ids {device_ids}, output_device {output_device}, and "
                         "module parameters {device(type='cpu')}: mpigrad runs on the CPU only, "
                         "so pass device_ids=None")
    if dim != 0:
        raise ValueError(f"DistributedDataParallel(dim={dim}): only dim=0 exists here (there is "
                         "no scatter across devices)")


def _is_cpu(name):
    # A bare index means an accelerator, which device() refuses to build on a CPU-only machine.
    try:
        return device(name).type == "cpu"
    except RuntimeError:
        return False


class DistributedDataParallel(Module, Joinable):
    """Data parallelism across the ranks of `process_group` (the default group if None).

    bucket_cap_mb           size cap of the gradient buckets after the first (about 1 MB)
    broadcast_buffers       re-broadcast buffers from rank 0 at every forward
    find_unused_parameters  allow parameters that get no gradient in an iteration (they are
                            found by walking the graph from the outputs, and reduced as zeros)
    gradient_as_bucket_view leave `.grad` as views into the buckets (saves a copy and memory);
                            either way a parameter of 1 MiB or more is reduced in `.grad`
                            itself, with no copy (see reducer.py); where ranks share hosts
                            and the default hook runs, `.grad` is always a view of the
                            shared buckets
    timeline                path of a Chrome-trace timeline (see timeline.py); default: the
                            MPIGRAD_TIMELINE environment variable, if set

    The arguments are torch's, in torch's order. The GPU placement ones take their CPU values:
    `device_ids` None (or empty, or CPU devices), `output_device` None or the CPU, `dim` 0;
    `init_sync` (always True here: the parameters are broadcast from rank 0), `static_graph`
    and `check_reduction` are accepted and change nothing; the features mpigrad lacks
    (`mixed_precision`, `device_mesh`, `delay_all_reduce_named_params`,
    `param_to_hook_all_reduce`, `skip_all_reduce_unused_params`) are errors when set.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, init_sync=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None,
                 mixed_precision=None, device_mesh=None, skip_all_reduce_unused_params=False,
                 *, timeline=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps an mpigrad.nn.Module, got "
                            f"{type(module).__name__}")
        _check_cpu_placement(device_ids, output_device, dim)
        unsupported = {"delay_all_reduce_named_params": delay_all_reduce_named_params,
                       "param_to_hook_all_reduce": param_to_hook_all_reduce,
                       "mixed_precision": mixed_precision, "device_mesh": device_mesh,
                       "skip_all_reduce_unused_params": skip_all_reduce_unused_params}
        for name, value in unsupported.items():
            if value not in (None, False):
                raise ValueError(f"DistributedDataParallel({name}=...) is not supported by "
                                 "mpigrad; leave it at its default")
        _refuse_sparse_gradients(module)
        if bucket_cap_mb is None:
            bucket_cap_mb = 25  # torch's default
        pg = process_group if process_group is not None else \
            _get_default_group("DistributedDataParallel")
        self.module = module
        self.process_group = pg
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self._channel = Channel(pg)
        self.rank = self._channel.rank
        self.world_size = self._channel.world_size
        named_params = list(module.named_parameters())
        named_buffers = list(module.named_buffers())
        verify_same_model(self._channel, named_params, named_buffers)
        with grad_mode.no_grad():
            self._channel.broadcast_arrays([p._array for _, p in named_params] +
                                           [b._array for _, b in named_buffers], 0,
                                           "broadcast of rank 0's parameters and buffers")
        trainable = [(name, p) for name, p in named_params if p.requires_grad]
        if not trainable:
            raise RuntimeError("DistributedDataParallel: the module has no parameter that "
                               "requires a gradient; there is nothing to synchronize")
        template = timeline if timeline is not None else os.environ.get(TIMELINE_ENV)
        self.timeline = Timeline(timeline_path(template, self.rank), self.rank) \
            if template else None
        # Which ranks share a host, collectively, at the same point on every rank. Where ranks
        # share hosts, the buckets live in memory each host's ranks share, and
        # the default hook sums them there (and across hosts slice by slice); otherwise it
        # goes hierarchical where that pays.
        with self._channel.blocked("finding which ranks share a host"):
            names = host_names(self._channel.control)
        shared = SharedBuckets.create(self._channel.control, pg, [p for _, p in trainable],
                                      names)
        default_state = HierarchicalState(only_if_useful=True)
        if shared is None:
            default_state.build(self._channel.comm, pg, names)
        self.reducer = Reducer([p for _, p in trainable], [n for n, _ in trainable],
                               self._channel, int(bucket_cap_mb * (1 << 20)),
                               (default_state, hierarchical_allreduce_hook),
                               find_unused_parameters=find_unused_parameters,
                               gradient_as_bucket_view=gradient_as_bucket_view,
                               timeline=self.timeline, shared=shared)
        self._join_config = None

    # ------------------------------------------------------------------ forward
    def forward(self, *inputs, **kwargs):
        # Before any other collective: a backward that raised here left the other ranks
        # waiting in the end-of-backward agreement, which must be answered first.
        self.reducer.settle_previous_iteration()
        root = 0
        if self._join_config is not None and self._join_config.enable:
            active = notify_join_context(self)
            root = int(np.flatnonzero(active)[-1])
        if self.broadcast_buffers:
            self._sync_buffers(root)
        output = self.module(*inputs, **kwargs)
        if grad_mode.is_grad_enabled() and self.require_backward_grad_sync:
            self.reducer.prepare_for_backward(output)
        return output

    def _sync_buffers(self, root):
        buffers = [b._array for b in self.module.buffers()]
        if buffers and self.world_size > 1:
            self._channel.broadcast_arrays(buffers, root, f"broadcast of rank {root}'s buffers")

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward only accumulates gradients locally; the first backward after it
        averages the accumulated gradients across ranks."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def register_comm_hook(self, state, hook):
        """Reduce each bucket with `hook(state, bucket) -> Future` (see
        ddp/bucket.py; hooks in algorithms.ddp_comm_hooks). Call once, before the first
        backward."""
        self.reducer.register_comm_hook(state, hook)

    def enable_timeline(self, path):
        """Start recording a Chrome-trace timeline; `path` may contain `{rank}` (see
        timeline.py). With `path` None the events are only kept in memory
        (`ddp.timeline.events`, `timeline.summarize`)."""
        resolved = None if path is None else timeline_path(path, self.rank)
        self.timeline = self.reducer.timeline = Timeline(resolved, self.rank)
        return self.timeline

    # ------------------------------------------------------------------ join
    def join_hook(self, **kwargs):
        return _DDPJoinHook(self)

    @property
    def join_device(self):
        return "cpu"

    @property
    def join_process_group(self):
        return self.process_group

    def _sync_final_model(self, is_last_joiner):
        """After Join: every rank takes parameters and buffers from a rank that trained to
        the end (the highest such rank)."""
        candidate = np.array([self.rank if is_last_joiner else -1], np.int64)
        self._channel.allreduce_max(candidate, "Join: choosing a rank that trained to the end")
        arrays = [p._array for p in self.module.parameters()] + \
            [b._array for b in self.module.buffers()]
        self._channel.broadcast_arrays(arrays, int(candidate[0]),
                                       f"Join: broadcast of rank {int(candidate[0])}'s model")


class _DDPJoinHook(JoinHook):
    def __init__(self, ddp):
        self.ddp = ddp

    def main_hook(self):
        ddp = self.ddp
        if ddp.broadcast_buffers:
            ddp._sync_buffers(int(np.flatnonzero(ddp._join_config.active)[-1]))
        ddp.reducer.shadow_iteration()

    def post_hook(self, is_last_joiner):
        self.ddp._sync_final_model(is_last_joiner)


def _signature(named_params, named_buffers):
    entries = [("param", n, tuple(p.shape), str(p.dtype), bool(p.requires_grad))
               for n, p in named_params]
    entries += [("buffer", n, tuple(b.shape), str(b.dtype), False) for n, b in named_buffers]
    return entries


def verify_same_model(channel, named_params, named_buffers):
    """Raise on every rank, naming the first difference, if the ranks' models differ in the
    number, shapes, dtypes or requires_grad of parameters, or in buffers."""
    entries = _signature(named_params, named_buffers)
    # Names are left out of the checksum: ranks may legitimately name modules differently.
    described = repr([(kind, shape, dtype, rg) for kind, _, shape, dtype, rg in entries])
    mine = np.array([len(named_params), len(named_buffers),
                     zlib.crc32(described.encode())], np.int64)
    everyone = channel.allgather(mine, "the check that every rank has the same model")
    if (everyone == everyone[0]).all():
        return
    # Small metadata: pickled objects are fine here.
    all_entries = channel.allgather_object(entries, "gathering the models' descriptions")
    raise RuntimeError(_mismatch_message(all_entries))


def _mismatch_message(all_entries):
    world = len(all_entries)
    head = "DistributedDataParallel: the model differs across ranks; every rank must build " \
           "the same model before wrapping it.\n"
    for kind in ("param", "buffer"):
        per_rank = [[e for e in entries if e[0] == kind] for entries in all_entries]
        counts = [len(x) for x in per_rank]
        for i in range(max(counts)):
            seen = {}
            for r in range(world):
                desc = "missing" if i >= counts[r] else \
                    f"shape {per_rank[r][i][2]} dtype {per_rank[r][i][3]}" + \
                    ("" if kind == "buffer" or per_rank[r][i][4] else " (frozen)")
                seen.setdefault(desc, []).append(r)
            if len(seen) > 1:
                name = next(per_rank[r][i][1] for r in range(world) if i < counts[r])
                what = "parameter" if kind == "param" else "buffer"
                lines = [f"  {desc} on rank(s) {ranks}" for desc, ranks in seen.items()]
                count_note = ""
                if len(set(counts)) > 1:
                    count_note = f"The ranks have {counts} {what}s (rank order).\n"
                return (head + count_note + f"The first difference is at {what} {i} "
                        f"('{name}'):\n" + "\n".join(lines))
    return head
