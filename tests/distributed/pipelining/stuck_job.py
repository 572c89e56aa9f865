"""A 2-stage pipeline job for test_pipelining's fault tests. `raise`: the last stage's loss
raises on the second micro-batch, while the first stage waits for gradients. `stall`: the last
stage never starts its step (a 1 s group timeout). Either must end the job, not hang it."""
import datetime
import sys
import time

import mpigrad.distributed as dist
from mpigrad.distributed.pipelining import Schedule1F1B
from tests.distributed.pipelining._models import batch, chain, cut, mse

mode = sys.argv[1]
dist.init_process_group(timeout=datetime.timedelta(seconds=1 if mode == "stall" else 300))
calls = []


def failing_loss(out, target):
    calls.append(1)
    if len(calls) == 2:
        raise RuntimeError("loss failed on purpose")
    return mse(out, target)


rank = dist.get_rank()
x, y = batch(0)
stage = cut(chain(2), 2, x).build_stage(rank)
schedule = Schedule1F1B(stage, 4, loss_fn=failing_loss if mode == "raise" else mse)
if rank == 0:
    schedule.step(x)
elif mode == "stall":
    time.sleep(600)
else:
    schedule.step(target=y)
