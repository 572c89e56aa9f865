"""mpigrad.distributed.pipelining at the suite's world size (1, 2 or 3 ranks, one pipeline
stage per rank, two for the interleaved schedule): every schedule gives the gradients, losses,
outputs and optimizer steps of the whole model in one process (float64, 1e-10); the schedules'
orders never deadlock; pipeline() cuts chains at module boundaries and refuses other forwards.
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                            ScheduleInterleaved1F1B, SplitPoint, pipeline)
from mpigrad.distributed.pipelining.schedules import (gpipe_order, interleaved_order,
                                                      one_f_one_b_order)
from tests.distributed._environment import job_environment

from ._models import batch, chain, cut, mse, optimizer_for

TOL = dict(rtol=1e-10, atol=1e-10)
SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B,
             "Interleaved1F1B": ScheduleInterleaved1F1B}


@pytest.mark.parametrize("optimizer", ["SGD", "AdamW"])
@pytest.mark.parametrize("schedule_name", list(SCHEDULES))
def test_a_schedule_equals_one_process(schedule_name, optimizer, rank, size):
    per_rank = 2 if schedule_name == "Interleaved1F1B" else 1
    num_stages = size * per_rank
    n_microbatches = 6 if size == 3 else 4
    x0, _ = batch(0)
    pipe = cut(chain(num_stages), num_stages, x0)
    mine = list(range(rank, num_stages, size))
    stages = [pipe.build_stage(i) for i in mine]
    schedule_class = SCHEDULES[schedule_name]
    schedule = schedule_class(stages if per_rank > 1 else stages[0], n_microbatches,
                              loss_fn=mse)
    modules = [pipe.get_stage_module(i) for i in mine]
    stage_optimizer = optimizer_for(optimizer, [p for m in modules for p in m.parameters()])
    reference = chain(num_stages)
    reference_optimizer = optimizer_for(optimizer, reference.parameters())
    reference_params = dict(reference.named_parameters())

    for step in range(3):
        x, y = batch(step)
        stage_optimizer.zero_grad()
        losses = []
        out = schedule.step(*((x,) if 0 in mine else ()),
                            target=y if num_stages - 1 in mine else None, losses=losses)
        reference_optimizer.zero_grad()
        reference_out = reference(x)
        mse(reference_out, y).backward()
        if num_stages - 1 in mine:
            np.testing.assert_allclose(out._array, reference_out._array, **TOL)
            size_mb = x.shape[0] // n_microbatches
            expected = [mse(reference_out[i:i + size_mb], y[i:i + size_mb]).item()
                        for i in range(0, x.shape[0], size_mb)]
            np.testing.assert_allclose([loss.item() for loss in losses], expected, **TOL)
        else:
            assert out is None and losses == []
        for module in modules:
            for name, param in module.named_parameters():
                np.testing.assert_allclose(param.grad._array, reference_params[name].grad._array,
                                           err_msg=f"step {step}, {name}", **TOL)
        stage_optimizer.step()
        reference_optimizer.step()
    for module in modules:
        for name, param in module.named_parameters():
            np.testing.assert_allclose(param._array, reference_params[name]._array, err_msg=name,
                                       **TOL)


def test_forward_only_and_uneven_micro_batches(rank, size):
    """Without a loss_fn a step only runs forwards; 3 micro-batches of a batch of 10 are 4, 3,
    3 long (torch.tensor_split's split)."""
    x, _ = batch(0, size=10)
    pipe = cut(chain(size), size, x)
    schedule = Schedule1F1B(pipe.build_stage(rank), 3)
    out = schedule.step(*((x,) if rank == 0 else ()))
    if rank == size - 1:
        np.testing.assert_allclose(out._array, chain(size)(x)._array, **TOL)
        assert all(p.grad is None for p in pipe.get_stage_module(rank).parameters())


def _simulate(orders, num_stages):
    """Run each rank's order, an action starting only once its input exists (an activation
    from the previous stage, a gradient from the next): True if every action runs."""
    done = set()
    heads = {rank: 0 for rank in orders}
    progressed = True
    while progressed:
        progressed = False
        for rank, order in orders.items():
            while heads[rank] < len(order):
                stage, kind, mb = order[heads[rank]]
                needs = []
                if kind == "F" and stage > 0:
                    needs.append((stage - 1, "F", mb))
                if kind == "B":
                    needs.append((stage, "F", mb))
                    if stage < num_stages - 1:
                        needs.append((stage + 1, "B", mb))
                if not all(need in done for need in needs):
                    break
                done.add((stage, kind, mb))
                heads[rank] += 1
                progressed = True
    return all(heads[rank] == len(order) for rank, order in orders.items())


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_every_order_runs_every_action_without_deadlock(p):
    for m in (1, 2, 3, 5, 8):
        assert _simulate({r: gpipe_order(r, m) for r in range(p)}, p)
        orders = {r: one_f_one_b_order(r, p, m) for r in range(p)}
        assert _simulate(orders, p)
        # At most p - r micro-batches in flight on stage r (1F1B's memory bound).
        for r, order in orders.items():
            live = peak = 0
            for _, kind, _ in order:
                live += 1 if kind == "F" else -1
                peak = max(peak, live)
            assert peak <= min(m, p - r)
    for v in (1, 2, 3):
        for m in (p, 2 * p, 3 * p):
            orders = {r: interleaved_order(r, p, v, m) for r in range(p)}
            assert all(sorted(order) == sorted(
                [(s, k, mb) for s in range(r, p * v, p) for k in "FB" for mb in range(m)])
                for r, order in orders.items())
            assert _simulate(orders, p * v), (p, v, m)


class _Chained(nn.Module):
    """A model whose forward calls its children in order: an embedding-like first layer, a
    ModuleList of blocks, a head."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 4)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.Tanh())
                                     for _ in range(3)])
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class _Skip(_Chained):
    def forward(self, x):
        return super().forward(x) + 1.0


def test_pipeline_cuts_a_chain_of_named_children_and_keeps_their_names():
    mg.manual_seed(0)
    model = _Chained().double()
    x, _ = batch(0)
    pipe = pipeline(model, (x[:2],), split_spec={"blocks.1": SplitPoint.BEGINNING,
                                                 "blocks.2": SplitPoint.END})
    assert pipe.num_stages == 3
    assert list(pipe.get_stage_module(0).state_dict()) == [
        "inp.weight", "inp.bias", "blocks.0.0.weight", "blocks.0.0.bias"]
    assert list(pipe.get_stage_module(2).state_dict()) == ["head.weight", "head.bias"]
    out = x
    for i in range(3):
        out = pipe.get_stage_module(i)(out)
    np.testing.assert_allclose(out._array, model(x)._array, **TOL)


def test_pipeline_refuses_what_it_cannot_cut():
    mg.manual_seed(0)
    x, _ = batch(0)
    with pytest.raises(ValueError, match="not the chain of its children"):
        pipeline(_Skip().double(), (x[:2],), split_spec={"head": SplitPoint.BEGINNING})
    model = chain(2)
    with pytest.raises(ValueError, match="'nowhere' is not a module of the chain"):
        pipeline(model, (x[:2],), split_spec={"nowhere": SplitPoint.BEGINNING})
    with pytest.raises(ValueError, match="empty first or last stage"):
        pipeline(model, (x[:2],), split_spec={"0": SplitPoint.BEGINNING})
    with pytest.raises(TypeError, match="must be a SplitPoint"):
        pipeline(model, (x[:2],), split_spec={"4": "beginning"})


def test_stage_and_schedule_arguments_are_checked(rank, size):
    module = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"stage_index 5 is not in \[0, 1\)"):
        PipelineStage(module, 5, 1)
    with pytest.raises(TypeError, match="group must be a ProcessGroup"):
        PipelineStage(module, 0, 1, group=object())
    if size > 1:
        with pytest.raises(ValueError, match="must be a multiple of the group's size"):
            PipelineStage(module, rank, size + 1)
        with pytest.raises(ValueError, match=f"runs on group rank {(rank + 1) % size}"):
            PipelineStage(module, (rank + 1) % size, size)
    stage = PipelineStage(module, rank, 2 * size)
    with pytest.raises(ValueError, match="use ScheduleInterleaved1F1B"):
        ScheduleGPipe(stage, 2)
    if size > 1:
        with pytest.raises(ValueError, match="multiple of the pipeline's ranks"):
            ScheduleInterleaved1F1B([stage, PipelineStage(module, rank + size, 2 * size)],
                                    2 * size + 1)
    with pytest.raises(ValueError, match="must pass its stages"):
        ScheduleInterleaved1F1B([stage], 2 * size)


@pytest.mark.mpi_skip  # launches its own job of 4 ranks
def test_pipeline_times_ddp_on_two_by_two_equals_one_process():
    job = [sys.executable, str(Path(__file__).with_name("pp_ddp_job.py"))]
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    result = subprocess.run(["timeout", "180", mpiexec, "-n", "4", *job], capture_output=True,
                            text=True, env=job_environment())
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.count("equals one process") == 4, result.stdout


def test_pipeline_checks_the_cut_in_eval_mode_and_restores_each_mode():
    mg.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.5), nn.BatchNorm1d(5),
                          nn.Linear(5, 2)).double()
    model[2].eval()
    x, _ = batch(0)
    before = model[2].running_mean._array.copy()
    pipe = pipeline(model, (x[:4],), split_spec={"2": SplitPoint.BEGINNING})
    assert pipe.num_stages == 2
    assert [m.training for m in model] == [True, True, False, True]
    np.testing.assert_array_equal(model[2].running_mean._array, before)


@pytest.mark.mpi_skip  # launches its own jobs of 2 ranks
@pytest.mark.parametrize("mode", ["raise", "stall"])
def test_a_stage_that_fails_or_stalls_ends_the_job(mode):
    job = [sys.executable, str(Path(__file__).with_name("stuck_job.py")), mode]
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    result = subprocess.run(["timeout", "120", mpiexec, "-n", "2", *job], capture_output=True,
                            text=True, env=job_environment())
    assert result.returncode not in (0, 124), result.stderr
    if mode == "raise":
        assert "[rank 1] RuntimeError: loss failed on purpose" in result.stderr
    else:
        assert ("pipeline stage 0 waiting for the gradient of micro-batch 0 from rank 1 on the "
                "default group has been blocked on rank 0 for longer than the group's timeout "
                "(1 s)") in result.stderr, result.stderr[-3000:]
