"""`PipelineStage`: one stage of a pipeline, its forward and backward of one micro-batch, and
its messages to the neighbouring stages (messages.py)."""
import contextlib
import numbers

from ...autograd.backward import backward as autograd_backward
from ...dtypes import is_differentiable
from ...nn import Module
from ...tensor import Tensor
from ..ddp.wrapper import DistributedDataParallel
from ..process_group import GroupMember, member_group
from .messages import ACTIVATION, GRADIENT, Inbox

__all__ = ["PipelineStage"]


class PipelineStage:
    """Stage `stage_index` of `num_stages`, running `submodule`, as torch's PipelineStage.

    Stage i runs on rank `i % group_size` of `group` (the default group when None): one stage
    per rank for ScheduleGPipe and Schedule1F1B, `num_stages / group_size` per rank, round
    robin, for ScheduleInterleaved1F1B. The first stage takes the step's inputs; every other
    stage takes one tensor, the previous stage's output. `submodule` may be wrapped in
    DistributedDataParallel for pipeline x data parallelism: its gradients are then averaged
    once per step, in the stage's last backward. `device` (CPU only) is accepted for torch's
    signature; `input_args`/`output_args` are not needed (shapes travel with the messages).
    """

    def __init__(self, submodule, stage_index, num_stages, device=None, input_args=None,
                 output_args=None, group=None, dw_builder=None):
        if not isinstance(submodule, Module):
            raise TypeError(f"PipelineStage: submodule must be an nn.Module, got "
                            f"{type(submodule).__name__}")
        if dw_builder is not None:
            raise NotImplementedError("PipelineStage(dw_builder=...): zero-bubble schedules "
                                      "are not implemented")
        if device is not None and str(device) != "cpu":
            raise ValueError(f"PipelineStage: mpigrad runs on the CPU, got device={device!r}")
        for name, value in (("stage_index", stage_index), ("num_stages", num_stages)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"PipelineStage: {name} must be an int, got {value!r}")
        if not 0 <= stage_index < num_stages:
            raise ValueError(f"PipelineStage: stage_index {stage_index} is not in "
                             f"[0, {num_stages})")
        pg = member_group(group, "PipelineStage")
        if pg is None or group is GroupMember.NON_GROUP_MEMBER:
            raise ValueError("PipelineStage: this rank is not a member of group")
        if num_stages % pg.size():
            raise ValueError(f"PipelineStage: num_stages ({num_stages}) must be a multiple of "
                             f"the group's size ({pg.size()}): stage i runs on group rank "
                             "i % group size")
        if stage_index % pg.size() != pg.rank():
            raise ValueError(f"PipelineStage: stage {stage_index} runs on group rank "
                             f"{stage_index % pg.size()}, but this is group rank {pg.rank()}")
        self.submod = submodule
        self.stage_index = int(stage_index)
        self.num_stages = int(num_stages)
        self.group = group
        self.group_rank, self.group_size = pg.rank(), pg.size()
        self._ranks = pg.ranks  # group rank -> global rank, what p2p's peers are
        self._step = None

    @property
    def is_first(self):
        return self.stage_index == 0

    @property
    def is_last(self):
        return self.stage_index == self.num_stages - 1

    def _peer(self, stage):
        return self._ranks[stage % self.group_size]

    # ------------------------------------------------------------------ one step
    def begin_step(self, n_microbatches, has_backward, loss_scale, outbox):
        """Post this step's receives: activations from the previous stage, gradients from
        the next. The last stage backpropagates each micro-batch's loss times `loss_scale`."""
        self._step = _StepState(n_microbatches, loss_scale, outbox)
        if not self.is_first:
            self._step.activations = Inbox(self.group, self._peer(self.stage_index - 1),
                                           ACTIVATION, self.stage_index, n_microbatches)
        if has_backward and not self.is_last:
            self._step.gradients = Inbox(self.group, self._peer(self.stage_index + 1),
                                         GRADIENT, self.stage_index, n_microbatches)

    def poll(self):
        for inbox in (self._step.activations, self._step.gradients):
            if inbox is not None:
                inbox.poll()

    def forward_one_chunk(self, microbatch, args=(), kwargs=None, target=None, loss_fn=None):
        """Run micro-batch `microbatch` through the stage and pass its output on; on the last
        stage, with `loss_fn`, also its loss, which is returned."""
        step = self._step
        if not self.is_first:
            received = step.activations.take(microbatch)
            if is_differentiable(received.dtype):
                received.requires_grad_(True)
            args = (received,)
        with self._no_sync():
            output = self.submod(*args, **(kwargs or {}))
        if not isinstance(output, Tensor):
            raise TypeError(f"pipeline stage {self.stage_index} returned "
                            f"{type(output).__name__}; a stage passes on one Tensor")
        loss = None
        if self.is_last:
            if loss_fn is not None:
                loss = loss_fn(output, target)
        else:
            step.outbox.send(output.detach(), self._peer(self.stage_index + 1), ACTIVATION,
                             self.stage_index + 1, microbatch, step.n)
        step.saved[microbatch] = (args, output, loss)
        return output, loss

    def backward_one_chunk(self, microbatch, last_backward):
        """Backpropagate micro-batch `microbatch` through the stage (from its scaled loss on
        the last stage, from the next stage's gradient elsewhere) and send its input's
        gradient back."""
        step = self._step
        args, output, loss = step.saved.pop(microbatch)
        if self.is_last:
            root, grad = loss * step.loss_scale, None
        else:
            root, grad = output, step.gradients.take(microbatch)
        if root.requires_grad and (self.is_last or grad is not None):
            with self._gradient_sync(last_backward, output):
                autograd_backward(root, grad)
        if not self.is_first:
            (received,) = args
            step.outbox.send(received.grad if received.requires_grad else None,
                             self._peer(self.stage_index - 1), GRADIENT,
                             self.stage_index - 1, microbatch, step.n)

    def end_step(self):
        self._step = None

    # ------------------------------------------------------------------ DDP
    def _no_sync(self):
        """A DDP submodule's forwards run without arming its reducer: the step's last
        backward arms it itself (`_gradient_sync`)."""
        if isinstance(self.submod, DistributedDataParallel):
            return self.submod.no_sync()
        return contextlib.nullcontext()

    def _gradient_sync(self, last_backward, output):
        if not isinstance(self.submod, DistributedDataParallel):
            return contextlib.nullcontext()
        if last_backward:
            # What DDP's forward does outside no_sync: this backward averages the gradients
            # accumulated over the step's micro-batches (torch's pipelining does the same).
            self.submod.reducer.prepare_for_backward(output)
            return contextlib.nullcontext()
        return self.submod.no_sync()


class _StepState:
    def __init__(self, n_microbatches, loss_scale, outbox):
        self.n = n_microbatches
        self.loss_scale = loss_scale
        self.outbox = outbox
        self.activations = None
        self.gradients = None
        self.saved = {}  # micro-batch -> (inputs, output, loss) until its backward
