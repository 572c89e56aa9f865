"""A 2-rank FSDP job whose rank 1 stops (sleeps far past the group's 3 s timeout) after one
training step: rank 0 waits in the root unit's all-gather of the next forward until the
watchdog ends the job, naming that gather. Run by test_errors.py under a hard timeout."""
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from mpigrad.distributed.fsdp import fully_shard  # noqa: E402
from tests.distributed.fsdp._gpt import batches, build  # noqa: E402

dist.init_process_group(timeout=datetime.timedelta(seconds=3))
model = build()
for block in model.h:
    fully_shard(block)
fully_shard(model)
(idx, targets), = batches(1, 1)[0]
rows = slice(dist.get_rank() * 3, dist.get_rank() * 3 + 3)
_, loss = model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
loss.backward()
print(f"READY {dist.get_rank()}", flush=True)
if dist.get_rank() == 1:
    time.sleep(60)
model(mg.tensor(idx[rows]), mg.tensor(targets[rows]))
print("NOT REACHED", flush=True)
