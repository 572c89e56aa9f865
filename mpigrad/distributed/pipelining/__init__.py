"""mpigrad.distributed.pipelining: torch.distributed.pipelining over MPI.

    pipe = pipeline(model, mb_args=(x[:2],), split_spec={"layers.2": SplitPoint.BEGINNING})
    stage = pipe.build_stage(rank, group=pp_group)          # or PipelineStage(module, i, n)
    schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loss_fn)
    if stage.is_first: schedule.step(x)
    elif stage.is_last: losses = []; out = schedule.step(target=y, losses=losses)
    else: schedule.step()

Stages exchange activations and their gradients as nonblocking point-to-point messages
(messages.py), posted ahead and waited for only when needed, under the watchdog. Schedules:
ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B (schedules.py). `pipeline` cuts a model
at module boundaries only (split.py); torch traces the forward and may cut anywhere.
A stage's module may be wrapped in DistributedDataParallel over another group (pipeline x
data parallelism): its gradients are averaged once per step.
"""
from .schedules import (PipelineScheduleMulti, PipelineScheduleSingle, Schedule1F1B,
                        ScheduleGPipe, ScheduleInterleaved1F1B)
from .split import Pipe, SplitPoint, pipeline
from .stage import PipelineStage

__all__ = ["PipelineStage", "pipeline", "Pipe", "SplitPoint", "ScheduleGPipe", "Schedule1F1B",
           "ScheduleInterleaved1F1B", "PipelineScheduleSingle", "PipelineScheduleMulti"]
