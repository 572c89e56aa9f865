"""mpigrad.profiler as torch.profiler: the schedule's actions, when on_trace_ready runs,
what a saved cycle holds, the tensorboard handler's files and the activities."""
import json
import warnings

import pytest

import mpigrad as mg
from mpigrad import profiler

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kwargs", [dict(wait=1, warmup=1, active=2),
                                    dict(wait=2, warmup=1, active=3, repeat=2),
                                    dict(wait=1, warmup=2, active=1, skip_first=3),
                                    dict(wait=3, warmup=1, active=2, skip_first_wait=1)])
def test_schedule_actions_are_torchs(kwargs):
    ours, theirs = profiler.schedule(**kwargs), torch.profiler.schedule(**kwargs)
    assert [ours(s).name for s in range(25)] == [theirs(s).name for s in range(25)]


def test_bad_schedules_and_activities_as_torch():
    for lib in (profiler, torch.profiler):
        with pytest.raises(AssertionError):
            lib.schedule(wait=0, warmup=0, active=0)
        with pytest.warns(UserWarning, match="warmup"):
            lib.schedule(wait=0, warmup=0, active=1)
    assert list(profiler.ProfilerActivity.__members__) == \
        list(torch.profiler.ProfilerActivity.__members__)
    with pytest.warns(UserWarning, match="CPU only"):
        profiler.profile(activities=[profiler.ProfilerActivity.CPU,
                                     profiler.ProfilerActivity.CUDA])


def _train(lib, prof, steps):
    model = lib.nn.Linear(4, 3)
    for step in range(steps):
        with lib.profiler.record_function(f"step{step}"):
            model(lib.ones(2, 4)).sum().backward()
        prof.step()


def test_on_trace_ready_runs_when_torchs_does_and_holds_that_cycle(tmp_path):
    calls = {"ours": [], "theirs": []}
    for lib, key in ((mg, "ours"), (torch, "theirs")):
        kwargs = dict(schedule=lib.profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
                      on_trace_ready=lambda p, key=key: calls[key].append(
                          (p.step_num, sorted({e.name for e in p.events()
                                               if e.name.startswith("step")}))),
                      activities=[lib.profiler.ProfilerActivity.CPU])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with lib.profiler.profile(**kwargs) as prof:
                _train(lib, prof, 10)
    assert calls["ours"] == calls["theirs"] == [(4, ["step2", "step3"]), (8, ["step6", "step7"])]


def test_a_block_without_a_schedule_is_recorded_whole_and_tabled(tmp_path):
    with profiler.profile(record_shapes=True,
                          on_trace_ready=profiler.tensorboard_trace_handler(
                              str(tmp_path), worker_name="w0")) as prof:
        with profiler.record_function("forward"):
            mg.nn.Linear(4, 3)(mg.ones(2, 4)).sum().backward()
    names = {e.name for e in prof.events()}
    assert {"forward", "linear", "sum"} <= names
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    assert "Self CPU" in table and len(table.splitlines()) >= 5
    (trace,) = tmp_path.glob("w0.*.pt.trace.json")
    assert {e["name"] for e in json.loads(trace.read_text())["traceEvents"]} >= {"forward",
                                                                                  "linear"}
