"""jobs/tools/plot.py: PNGs from metrics and timeline files, and its errors."""

import contextlib
import importlib.util
import io
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed._environment import job_environment

pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]
PLOT = str(REPO / "jobs" / "tools" / "plot.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def plot_command(*args):
    return subprocess.run([sys.executable, PLOT, *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, MPLBACKEND="Agg"))


_spec = importlib.util.spec_from_file_location("jobs_plot", PLOT)
plot_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot_module)


def plot(*args):
    """plot.py's command line run by its main() in this process, with the exit code and
    stderr the script would give: an interpreter and a matplotlib import per plot cost
    about 0.9 s of CPU. test_metrics_plot_is_a_png runs the script itself."""
    errors, code = io.StringIO(), 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
        try:
            plot_module.main([str(a) for a in args])
        except SystemExit as stopped:
            code = stopped.code
    if isinstance(code, str):  # what the interpreter does with SystemExit("message")
        errors.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess(args, code or 0, "", errors.getvalue())


def assert_png(path, min_width=400, min_height=300):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= min_width and height >= min_height, (width, height)
    assert len(data) > 10_000, f"{path}: {len(data)} bytes, suspiciously small for a plot"


def write_metrics(path, epochs=4):
    with open(path, "w") as f:
        for e in range(1, epochs + 1):
            f.write(json.dumps({"epoch": e, "loss": 1.0 / e, "accuracy": 1 - 0.5 / e,
                                "test_accuracy": 1 - 0.6 / e, "samples_per_sec": 1000.0}))
            f.write("\n")


def x_span(name, ts, dur, step, tid=1, pid=0, **args):
    return {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": dict(step=step, **args)}


def timeline_events(steps=5, buckets=3):
    """A DDP-like trace: backward of 3 ms; bucket b ready late in it, reduced right after."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
               "args": {"name": "rank 0"}}]
    for s in range(steps):
        t0 = 10_000.0 * s
        events.append(x_span("backward", t0, 3000, s, tid=0))
        for b in range(buckets):
            ready = t0 + 500 + 800 * b
            events.append(x_span(f"bucket {b} ready", ready, 300, s, tid=b + 1))
            events.append(x_span(f"bucket {b} allreduce", ready + 300, 1200 + 100 * b, s,
                                 tid=b + 1, bytes=4096))
        events.append(x_span("step", t0, 4500, s, tid=0, hidden_fraction=0.5))
    return events


def test_metrics_plot_is_a_png(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics)
    out = tmp_path / "loss.png"
    r = plot_command("metrics", metrics, "-o", out)
    assert r.returncode == 0, r.stderr
    assert_png(out)


def test_metrics_of_several_runs_and_missing_keys(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_metrics(a)
    b.write_text('{"epoch": 1, "loss": 2.0}\n\n{"epoch": 2, "loss": 1.0}\n')
    out = tmp_path / "both.png"
    r = plot("metrics", a, b, "-o", out)
    assert r.returncode == 0, r.stderr
    assert_png(out)


def test_metrics_with_a_validation_loss_as_train_gpt_writes_them(tmp_path):
    metrics = tmp_path / "gpt.jsonl"
    metrics.write_text("".join(json.dumps({"epoch": e, "step": 100 * e, "loss": 3.0 / e,
                                           "val_loss": 3.2 / e, "lr": 1e-3}) + "\n"
                               for e in range(1, 5)))
    out = tmp_path / "gpt.png"
    r = plot("metrics", metrics, "-o", out)
    assert r.returncode == 0, r.stderr
    assert_png(out)


def test_timeline_plot_is_a_png(tmp_path):
    trace = tmp_path / "timeline.json"
    trace.write_text(json.dumps({"traceEvents": timeline_events(), "displayTimeUnit": "ms"}))
    out = tmp_path / "timeline.png"
    r = plot("timeline", trace, "-o", out, "--step", 2)
    assert r.returncode == 0, r.stderr
    assert_png(out)


def test_timeline_from_begin_end_pairs_without_step_args(tmp_path):
    # A plain list of events, "B"/"E" pairs, steps known only from the backward spans.
    events = []
    for e in timeline_events(steps=3, buckets=2):
        if e["ph"] != "X":
            continue
        args = {k: v for k, v in e["args"].items() if k != "step"}
        if e["name"] == "backward":
            args["step"] = e["args"]["step"]
        events.append({"name": e["name"], "ph": "B", "pid": 0, "tid": e["tid"],
                       "ts": e["ts"], "args": args})
        events.append({"name": e["name"], "ph": "E", "pid": 0, "tid": e["tid"],
                       "ts": e["ts"] + e["dur"]})
    trace = tmp_path / "timeline.json"
    trace.write_text(json.dumps(events))
    out = tmp_path / "timeline.png"
    r = plot("timeline", trace, "-o", out)
    assert r.returncode == 0, r.stderr
    assert_png(out)
    steps = plot_module.bucket_steps(events)
    # Bucket allreduces start inside backward (bucket 0 and 1 here), so they get its step.
    assert sorted(steps) == [0, 1, 2]
    assert sorted(steps[1]["buckets"]) == [0, 1]
    assert steps[1]["buckets"][1]["allreduce"] == (10_000 + 1300 + 300,
                                                   10_000 + 1300 + 300 + 1300)


def test_timeline_without_bucket_events_is_an_error(tmp_path):
    trace = tmp_path / "empty.json"
    trace.write_text(json.dumps({"traceEvents": [x_span("backward", 0, 10, 0)]}))
    r = plot("timeline", trace, "-o", tmp_path / "x.png")
    assert r.returncode == 1
    assert "no 'bucket <i> ready'" in r.stderr
    assert not (tmp_path / "x.png").exists()


def test_bad_metrics_line_names_the_line(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 1, "loss": 1.0}\nnot json\n')
    r = plot("metrics", metrics, "-o", tmp_path / "x.png")
    assert r.returncode == 1
    assert f"{metrics}:2:" in r.stderr


def test_missing_matplotlib_is_named(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics)
    # Hide matplotlib from the child: a module of that name that fails to import.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=str(blocker))
    r = subprocess.run([sys.executable, PLOT, "metrics", str(metrics), "-o",
                        str(tmp_path / "x.png")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 1
    assert "matplotlib" in r.stderr and "mpigrad[plot]" in r.stderr


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="no mpiexec on PATH")
def test_plots_of_a_real_training_run(tmp_path):
    """The files train.py writes, not hand-made ones: the schema plot.py reads is real."""
    metrics, trace = tmp_path / "metrics.jsonl", tmp_path / "timeline.json"
    r = subprocess.run(["timeout", "240", "mpiexec", "-n", "2", sys.executable,
                        str(REPO / "jobs" / "train.py"), "--epochs", "2", "--train-samples",
                        "1000", "--metrics", str(metrics), "--timeline", str(trace)],
                       capture_output=True, text=True, env=job_environment(),
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    rank0 = sorted(tmp_path.glob("timeline*0*.json"))
    assert rank0, f"no rank-0 timeline among {os.listdir(tmp_path)}"
    r = plot("metrics", metrics, "-o", tmp_path / "loss.png")
    assert r.returncode == 0, r.stderr
    assert_png(tmp_path / "loss.png")
    r = plot("timeline", rank0[0], "-o", tmp_path / "timeline.png")
    assert r.returncode == 0, r.stderr
    assert_png(tmp_path / "timeline.png")
