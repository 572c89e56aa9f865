"""The DDP timeline streams to its file: flat memory over long runs, a readable trace after a
kill."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc

import pytest

from mpigrad.autograd.profiler import profile, record_function
from mpigrad.distributed.ddp import timeline as timeline_module
from mpigrad.distributed.ddp.timeline import Timeline, summarize

from .._environment import launcher_free_environment


def record_steps(timeline, first, count, buckets=3):
    for step in range(first, first + count):
        t = step * 1.0
        timeline.record_step(step, (t, t + 0.5), [
            {"index": i, "nbytes": 4096, "params": [f"layer{i}.weight"],
             "ready": (t + 0.1 * i, t + 0.1 * i + 0.05), "launched": t + 0.1 * i + 0.05,
             "completed": t + 0.1 * i + 0.2} for i in range(buckets)], t + 0.6, 0.01)


def test_the_file_is_valid_json_with_every_finished_step_after_each_step(tmp_path):
    path = tmp_path / "trace.json"
    timeline = Timeline(str(path), rank=0)
    assert json.loads(path.read_text())["traceEvents"]  # the track names
    for step in range(3):
        record_steps(timeline, step, 1)
        assert [s["step"] for s in summarize(json.loads(path.read_text()))] == list(
            range(step + 1))
    assert not timeline.events  # nothing waits in memory


def test_memory_stays_flat_over_many_steps(tmp_path):
    timeline = Timeline(str(tmp_path / "trace.json"), rank=0)
    record_steps(timeline, 0, 100)
    tracemalloc.start()
    try:
        record_steps(timeline, 100, 200)
        after_few, _ = tracemalloc.get_traced_memory()
        record_steps(timeline, 300, 1000)
        after_many, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 1000 steps of 8 events kept in memory would be about 5 MB, 75 times the bound.
    assert after_many - after_few < 64 * 1024
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert [s["step"] for s in summarize(trace)] == list(range(1300))


def test_without_a_file_only_the_newest_events_are_kept(monkeypatch):
    # The bound scaled down (the timeline reads it when it is built): 100 steps past 800
    # events show the same as 100 past 100,000, in 1/100 of the steps.
    monkeypatch.setattr(timeline_module, "MEMORY_EVENTS", 800)
    timeline = Timeline(None, rank=0)
    record_steps(timeline, 0, 800 // 8 + 100)
    assert len(timeline.events) == 800
    assert summarize(list(timeline.events))[-1]["step"] == 800 // 8 + 99


def test_a_killed_process_leaves_a_readable_trace_of_its_finished_steps(tmp_path):
    path = tmp_path / "trace.json"
    script = textwrap.dedent(f"""
        import time
        from tests.distributed.ddp.test_timeline import record_steps
        from mpigrad.distributed.ddp.timeline import Timeline

        timeline = Timeline({str(path)!r}, rank=1)
        record_steps(timeline, 0, 50)
        print("recorded", flush=True)
        time.sleep(600)
    """)
    # Not the launcher's variables: the child is a job of its own, not a rank of this one. The
    # environment has the repository on the path, for the import of record_steps.
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env=launcher_free_environment())
    try:
        assert child.stdout.readline() == "recorded\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    trace = json.loads(path.read_text())
    assert {e["pid"] for e in trace["traceEvents"]} == {1}
    assert [s["step"] for s in summarize(trace)] == list(range(50))


def test_timeline_and_profiler_share_one_clock():
    with profile() as prof:
        with record_function("step"):
            start = time.perf_counter()
            end = time.perf_counter()
    timeline = Timeline(None, rank=0)
    timeline.record_step(0, (start, end), [], end, 0.0)
    backward = next(e for e in timeline.events if e.get("ph") == "X")
    step = next(e for e in prof.events() if e.name == "step")
    assert step.start_ns / 1e3 <= backward["ts"] <= step.end_ns / 1e3


def test_a_symbolic_link_at_the_path_is_refused_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "trace.rank0.json"
    os.symlink(victim, link)
    with pytest.raises(OSError, match="is a symbolic link"):
        Timeline(str(link), rank=0)
    assert victim.read_text() == "keep"
