"""The schedules: in which order each rank runs its stages' forwards (F) and backwards (B) of
the micro-batches, as torch.distributed.pipelining's.

Every order here is deadlock-free with sends that never block (messages.py): a rank waits
only for a message its neighbour sends before it waits itself (tests/distributed/pipelining
checks every order on a simulated pipeline).

- GPipe: all forwards, then all backwards.
- 1F1B: stage s of p runs min(m, p - s - 1) forwards ahead, then alternates one forward and
  one backward, then the remaining backwards; at most p - s micro-batches' activations live.
- Interleaved 1F1B (Megatron-LM's): each of the p ranks holds v stages (stage s on rank
  s % p); forwards go through groups of p micro-batches stage by stage, backwards the same
  from the last stage, with (p - r - 1) * 2 + (v - 1) * p forwards ahead on rank r. The bubble
  shrinks by v; the number of micro-batches must be a multiple of p.
"""
import numbers

from ...ops.shape import cat
from ...tensor import Tensor
from .messages import Outbox
from .stage import PipelineStage

__all__ = ["PipelineScheduleSingle", "PipelineScheduleMulti", "ScheduleGPipe", "Schedule1F1B",
           "ScheduleInterleaved1F1B"]

FORWARD, BACKWARD = "F", "B"


class _PipelineSchedule:
    def __init__(self, stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                 output_merge_spec, scale_grads):
        if not isinstance(n_microbatches, numbers.Integral) or n_microbatches < 1:
            raise ValueError(f"n_microbatches must be an int >= 1, got {n_microbatches!r}")
        for name, spec in (("args_chunk_spec", args_chunk_spec),
                           ("kwargs_chunk_spec", kwargs_chunk_spec),
                           ("output_merge_spec", output_merge_spec)):
            if spec is not None:
                raise NotImplementedError(f"{name}: micro-batches are always split and merged "
                                          "along dimension 0; leave it None")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        for stage in stages:
            if not isinstance(stage, PipelineStage):
                raise TypeError(f"a schedule runs PipelineStages, got {type(stage).__name__}")
        self._stages = list(stages)
        self._n_microbatches = int(n_microbatches)
        self._loss_fn = loss_fn
        self._has_backward = loss_fn is not None
        self.scale_grads = scale_grads
        by_index = {stage.stage_index: stage for stage in self._stages}
        self._actions = [(by_index[index], kind, mb) for index, kind, mb in self._order()]

    def _order(self):
        """This rank's [(stage index, FORWARD or BACKWARD, micro-batch)] for one step."""
        raise NotImplementedError

    def step(self, *args, target=None, losses=None, **kwargs):
        """One pass of the whole batch through the pipeline, as torch's: the rank holding the
        first stage passes the inputs (split into micro-batches along dimension 0), the one
        holding the last stage the `target`; every rank calls it. With a `loss_fn`, each
        micro-batch is backpropagated and the gradients accumulate into `.grad` (those of the
        mean of the micro-batches' losses, torch's `scale_grads=True`). Returns the last
        stage's outputs, concatenated, on its rank (None elsewhere); its micro-batches'
        losses are appended to `losses`."""
        m = self._n_microbatches
        holds_first = any(stage.is_first for stage in self._stages)
        holds_last = any(stage.is_last for stage in self._stages)
        if holds_first and not (args or kwargs):
            raise ValueError("step(): this rank holds the first stage; pass it the inputs")
        if holds_last and self._has_backward and target is None:
            raise ValueError("step(): this rank holds the last stage, which computes the loss; "
                             "pass target=")
        args_mb = _split(args, m, "an input") if holds_first else [()] * m
        kwargs_mb = _split_kwargs(kwargs, m) if holds_first else [{}] * m
        targets = _split((target,), m, "target") if holds_last and target is not None else \
            [(None,)] * m
        outbox = Outbox(self._stages[0].group)
        for stage in self._stages:
            stage.begin_step(m, self._has_backward, 1.0 / m if self.scale_grads else 1.0,
                             outbox)
        outputs, mb_losses = [None] * m, [None] * m
        backwards_done = {id(stage): 0 for stage in self._stages}
        try:
            for stage, kind, mb in self._actions:
                for each in self._stages:
                    each.poll()
                if kind == FORWARD:
                    output, loss = stage.forward_one_chunk(mb, args_mb[mb], kwargs_mb[mb],
                                                           targets[mb][0], self._loss_fn)
                    if stage.is_last:
                        outputs[mb], mb_losses[mb] = output.detach(), loss
                else:
                    backwards_done[id(stage)] += 1
                    stage.backward_one_chunk(mb, backwards_done[id(stage)] == m)
            outbox.finish()
        finally:
            for stage in self._stages:
                stage.end_step()
        if not holds_last:
            return None
        if losses is not None and self._has_backward:
            losses.extend(loss.detach() for loss in mb_losses)
        return cat(outputs)


class PipelineScheduleSingle(_PipelineSchedule):
    """A schedule of one stage per rank (num_stages == the group's size)."""

    def __init__(self, stage, n_microbatches, loss_fn=None, args_chunk_spec=None,
                 kwargs_chunk_spec=None, output_merge_spec=None, scale_grads=True):
        if isinstance(stage, PipelineStage) and stage.num_stages != stage.group_size:
            raise ValueError(f"{type(self).__name__} runs one stage per rank, but there are "
                             f"{stage.num_stages} stages on {stage.group_size} ranks; use "
                             "ScheduleInterleaved1F1B for several stages per rank")
        self._stage = stage
        super().__init__([stage], n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads)


class ScheduleGPipe(PipelineScheduleSingle):
    def _order(self):
        return gpipe_order(self._stage.stage_index, self._n_microbatches, self._has_backward)


class Schedule1F1B(PipelineScheduleSingle):
    def _order(self):
        stage = self._stage
        return one_f_one_b_order(stage.stage_index, stage.num_stages, self._n_microbatches,
                                 self._has_backward)


class PipelineScheduleMulti(_PipelineSchedule):
    """A schedule of several stages per rank: `stages` are this rank's, stage s on group rank
    s % group size."""

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None,
                 kwargs_chunk_spec=None, output_merge_spec=None, scale_grads=True):
        if not isinstance(stages, (list, tuple)) or not stages:
            raise TypeError(f"{type(self).__name__} takes a non-empty list of this rank's "
                            f"PipelineStages, got {stages!r}")
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads)


class ScheduleInterleaved1F1B(PipelineScheduleMulti):
    def _order(self):
        first = self._stages[0]
        p, rank = first.group_size, first.group_rank
        expected = list(range(rank, first.num_stages, p))
        indices = sorted(stage.stage_index for stage in self._stages)
        if indices != expected or any((s.num_stages, s.group) != (first.num_stages, first.group)
                                      for s in self._stages):
            raise ValueError(f"ScheduleInterleaved1F1B: this rank (group rank {rank} of {p}) "
                             f"must pass its stages {expected} of {first.num_stages}, all on "
                             f"one group, got stages {indices}")
        m = self._n_microbatches
        if m % p:
            raise ValueError(f"ScheduleInterleaved1F1B needs a number of micro-batches that is "
                             f"a multiple of the pipeline's ranks: {m} is not a multiple of {p}")
        return interleaved_order(rank, p, len(self._stages), m, self._has_backward)


# The orders: [(stage index, FORWARD or BACKWARD, micro-batch)] one rank runs in a step.
def gpipe_order(stage, m, has_backward=True):
    order = [(stage, FORWARD, mb) for mb in range(m)]
    return order + [(stage, BACKWARD, mb) for mb in range(m)] if has_backward else order


def one_f_one_b_order(stage, num_stages, m, has_backward=True):
    forwards = [(stage, FORWARD, mb) for mb in range(m)]
    if not has_backward:
        return forwards
    return _alternating(forwards, [(stage, BACKWARD, mb) for mb in range(m)],
                        min(m, num_stages - stage - 1))


def interleaved_order(rank, p, v, m, has_backward=True):
    """Rank `rank` of `p`, holding stages rank, rank + p, ... (v of them)."""
    def action(k, kind):
        chunk = (k // p) % v
        if kind == BACKWARD:
            chunk = v - 1 - chunk
        return chunk * p + rank, kind, (k // (p * v)) * p + k % p

    forwards = [action(k, FORWARD) for k in range(m * v)]
    if not has_backward:
        return forwards
    return _alternating(forwards, [action(k, BACKWARD) for k in range(m * v)],
                        min(m * v, (p - rank - 1) * 2 + (v - 1) * p))


def _alternating(forwards, backwards, ahead):
    """`ahead` forwards, then one forward and one backward in turn, then the backwards left."""
    order = forwards[:ahead]
    for forward, backward in zip(forwards[ahead:], backwards):
        order += [forward, backward]
    return order + backwards[len(forwards) - ahead:]


def _split(values, m, what):
    """`values` (a tuple) as m tuples of micro-batches: Tensors split along dimension 0 (the
    first ones one longer when m does not divide the batch, as torch.tensor_split), anything
    else passed whole to each."""
    chunks = [[] for _ in range(m)]
    for value in values:
        if isinstance(value, Tensor):
            size = value.shape[0] if value.ndim else 0
            if size < m:
                raise ValueError(f"step(): {what} of batch size {size} cannot be split into "
                                 f"{m} micro-batches")
            start = 0
            for mb in range(m):
                stop = start + size // m + (mb < size % m)
                chunks[mb].append(value[start:stop])
                start = stop
        else:
            for chunk in chunks:
                chunk.append(value)
    return [tuple(chunk) for chunk in chunks]


def _split_kwargs(kwargs, m):
    names = list(kwargs)
    return [dict(zip(names, chunk)) for chunk in _split(tuple(kwargs.values()), m,
                                                         "a keyword input")]
