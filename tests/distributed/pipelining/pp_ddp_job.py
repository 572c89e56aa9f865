"""A job of 4 ranks for test_pipelining: two pipelines of two stages (ranks 0-1, 2-3), each
stage's module in DistributedDataParallel with its twin in the other pipeline (ranks 0-2,
1-3), each pipeline fed half the batch. The groups come from new_group (a 2 x 2 layout, not a
device mesh). Three AdamW steps with 1F1B must equal the whole model and batch in one process;
each rank prints "equals one process", or the job fails."""
import numpy as np

import mpigrad.distributed as dist
from mpigrad.distributed.pipelining import Schedule1F1B
from mpigrad.nn.parallel import DistributedDataParallel
from tests.distributed.pipelining._models import batch, chain, cut, mse, optimizer_for

STAGES, REPLICAS, MICROBATCHES = 2, 2, 2
TOL = dict(rtol=1e-10, atol=1e-10)


def main():
    dist.init_process_group()
    rank = dist.get_rank()
    assert dist.get_world_size() == STAGES * REPLICAS
    replica, stage_index = divmod(rank, STAGES)
    # Every rank creates every group, in the same order, as new_group requires.
    pipelines = [dist.new_group([r * STAGES + s for s in range(STAGES)]) for r in range(REPLICAS)]
    twins = [dist.new_group([r * STAGES + s for r in range(REPLICAS)]) for s in range(STAGES)]

    x0, _ = batch(0)
    module = cut(chain(STAGES), STAGES, x0).get_stage_module(stage_index)
    stage_module = DistributedDataParallel(module, process_group=twins[stage_index])
    stage = cut_stage(stage_module, stage_index, pipelines[replica])
    schedule = Schedule1F1B(stage, MICROBATCHES, loss_fn=mse)
    optimizer = optimizer_for("AdamW", module.parameters())
    reference = chain(STAGES)
    reference_optimizer = optimizer_for("AdamW", reference.parameters())
    reference_params = dict(reference.named_parameters())

    for step in range(3):
        x, y = batch(step)
        half = x.shape[0] // REPLICAS
        mine = slice(replica * half, (replica + 1) * half)
        optimizer.zero_grad()
        if stage.is_first:
            schedule.step(x[mine])
        else:
            schedule.step(target=y[mine])
        reference_optimizer.zero_grad()
        mse(reference(x), y).backward()
        for name, param in module.named_parameters():
            np.testing.assert_allclose(param.grad._array, reference_params[name].grad._array,
                                       err_msg=f"step {step} {name}", **TOL)
        optimizer.step()
        reference_optimizer.step()
    for name, param in module.named_parameters():
        np.testing.assert_allclose(param._array, reference_params[name]._array, err_msg=name, **TOL)
    print(f"rank {rank} (pipeline {replica}, stage {stage_index}): equals one process",
          flush=True)
    dist.destroy_process_group()


def cut_stage(stage_module, stage_index, group):
    from mpigrad.distributed.pipelining import PipelineStage  # noqa: keeps main() readable
    return PipelineStage(stage_module, stage_index, STAGES, group=group)


if __name__ == "__main__":
    main()
