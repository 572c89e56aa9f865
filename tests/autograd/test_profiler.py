"""The profiler: rows for every op and backward node, times that add up, memory that matches
tracemalloc, threads, Chrome traces. Relative checks only: absolute times are machine noise."""
import json
import threading
import time
import tracemalloc

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad import optim
from mpigrad.autograd.profiler import profile, record_function

COLUMNS = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
           "CPU Mem", "Self CPU Mem", "# of Calls"]


def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    params = [mg.tensor(rng.standard_normal(s).astype(np.float32) / 8, requires_grad=True)
              for s in ((64, 256), (256,), (256, 10), (10,))]
    x = mg.tensor(rng.standard_normal((512, 64)).astype(np.float32))
    y = mg.tensor(rng.integers(0, 10, 512))
    return params, x, y


def _forward(params, x):
    w1, b1, w2, b2 = params
    return (x @ w1 + b1).relu() @ w2 + b2


def _train_step(params, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(_forward(params, x), y).backward()
    opt.step()  # a row of its own, named as torch names it


def test_training_step_table_lists_ops_their_backward_and_the_optimizer():
    params, x, y = _mlp()
    opt = optim.SGD(params, lr=0.1)
    _train_step(params, opt, x, y)  # warm up
    with profile(profile_memory=True) as prof:
        with record_function("train_step"):
            _train_step(params, opt, x, y)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=100)
    header = table.splitlines()[1]
    positions = [header.index(c) for c in ["Self CPU %", "CPU total %", "CPU time avg",
                                            "Self CPU Mem", "# of Calls"]]
    assert positions == sorted(positions)
    names = {row.key for row in prof.key_averages()}
    for name in ("matmul", "add", "relu", "MmBackward0", "AddBackward0", "ReluBackward0",
                 "AccumulateGrad", "Optimizer.step#SGD.step", "train_step"):
        assert name in names, name
        assert name in table
    calls = {row.key: row.count for row in prof.key_averages()}
    # Two matmuls forward; backward's rules are ops too, recorded inside MmBackward0.
    assert calls["MmBackward0"] == 2 and calls["AccumulateGrad"] == 4
    assert calls["Optimizer.step#SGD.step"] == 1
    assert calls["matmul"] > 2
    rows = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=3).splitlines()
    assert len([r for r in rows if r and not r.startswith("-")]) == 1 + 3 + 1  # header, rows, total


def test_torch_uses_the_same_column_names():
    torch = pytest.importorskip("torch")
    with torch.profiler.profile(profile_memory=True) as prof:
        (torch.ones(4, requires_grad=True) * 2).sum().backward()
    header = prof.key_averages().table(row_limit=1).splitlines()[1]
    for column in COLUMNS:
        assert column in header


def test_self_times_add_up_to_the_step_wall_time():
    params, x, y = _mlp()
    opt = optim.SGD(params, lr=0.1)
    _train_step(params, opt, x, y)
    with profile() as prof:
        start_ns = time.perf_counter_ns()
        for _ in range(3):
            with record_function("train_step"):
                _train_step(params, opt, x, y)
        end_ns = time.perf_counter_ns()
    # Every row's self time, the step's own (Python between ops, the engine's bookkeeping)
    # included, adds up to the three steps' spans exactly, and the spans lie inside the
    # interval timed around them (the profiler's clock is perf_counter's).
    total_self = sum(row.self_cpu_time_total for row in prof.key_averages())
    steps = [e for e in prof.events() if e.name == "train_step"]
    assert abs(sum(e.cpu_time_total for e in steps) - total_self) <= 1e-6 * total_self
    assert all(start_ns <= e.start_ns <= e.end_ns <= end_ns for e in steps)
    assert 0 < total_self <= (end_ns - start_ns) / 1e3
    # Nested events: a parent's total is its self time plus its children's totals.
    step = [e for e in prof.events() if e.name == "Optimizer.step#SGD.step"]
    assert len(step) == 3 and all(e.cpu_time_total >= e.self_cpu_time_total for e in step)


def _net_bytes_of_forward(params, x):
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    out = _forward(params, x)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, out


def test_memory_matches_tracemalloc():
    params, x, _ = _mlp()
    want, out = _net_bytes_of_forward(params, x)  # the activations the graph keeps, and out
    del out
    with profile(profile_memory=True, record_shapes=True) as prof:
        with record_function("forward"):
            out = _forward(params, x)
    (forward,) = [e for e in prof.events() if e.name == "forward"]
    assert abs(forward.cpu_memory_usage - want) <= 0.1 * want, (forward.cpu_memory_usage, want)
    # The first matmul's output (512 x 256 float32) is what that op leaves allocated.
    first = next(e for e in prof.events() if e.name == "matmul")
    assert first.input_shapes == [[512, 64], [64, 256]]
    assert abs(first.cpu_memory_usage - 512 * 256 * 4) <= 0.1 * 512 * 256 * 4
    # Memory added up over rows equals the whole forward's (children are not counted twice).
    rows = prof.key_averages()
    assert sum(r.self_cpu_memory_usage for r in rows) == forward.cpu_memory_usage
    del out


def test_events_carry_their_thread_and_shapes_group_by_input_shape():
    params, x, y = _mlp()

    def worker():
        with record_function("worker"):
            (x[:8] @ params[0]).sum().backward()

    with profile(record_shapes=True) as prof:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        (x @ params[0]).sum().backward()
    threads = {e.name: set() for e in prof.events()}
    for e in prof.events():
        threads[e.name].add(e.thread)
    assert len(threads["matmul"]) == 2 and len(threads["MmBackward0"]) == 2
    assert threads["worker"] == {t.native_id}
    by_shape = [r for r in prof.key_averages(group_by_input_shape=True) if r.key == "matmul"]
    assert {"[[512, 64], [64, 256]]", "[[8, 64], [64, 256]]"} <= {r.input_shapes
                                                                  for r in by_shape}
    assert "Input Shapes" in prof.key_averages(group_by_input_shape=True).table()


def test_chrome_trace_uses_the_perf_counter_clock(tmp_path):
    params, x, y = _mlp()
    before = time.perf_counter() * 1e6
    with profile(with_stack=True) as prof:
        _forward(params, x).sum().backward()
    after = time.perf_counter() * 1e6
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(prof.events())
    assert {"matmul", "MmBackward0"} <= {e["name"] for e in events}
    for e in events:
        assert before <= e["ts"] and e["ts"] + e["dur"] <= after
    first_matmul = next(e for e in events if e["name"] == "matmul")
    assert "in _forward" in first_matmul["args"]["Call stack"]


def test_nothing_is_recorded_outside_a_profile_and_profiles_do_not_nest():
    with record_function("alone"):
        x = mg.ones(3, requires_grad=True) * 2
    with profile() as prof:
        with pytest.raises(RuntimeError, match="already recording"):
            with profile():
                pass
    assert prof.events() == []
    with profile(enabled=False) as off:
        x.sum().backward()
    assert off.events() == []


def test_every_optimizer_step_is_one_row_named_as_torch_names_it():
    class Scaled(optim.SGD):
        pass

    params, x, y = _mlp()
    for opt, name in [(optim.Adam(params), "Adam"), (Scaled(params, lr=0.1), "Scaled")]:
        with profile() as prof:
            _train_step(params, opt, x, y)
        calls = {row.key: row.count for row in prof.key_averages()}
        assert calls[f"Optimizer.step#{name}.step"] == 1
        assert not any(k.startswith("Optimizer.step#") and k != f"Optimizer.step#{name}.step"
                       for k in calls)
