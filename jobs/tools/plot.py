"""Plots of a training run: per-epoch metrics, and DDP's gradient-bucket timeline.

    python jobs/tools/plot.py metrics runs/x/metrics.jsonl -o loss.png
    python jobs/tools/plot.py metrics a/metrics.jsonl b/metrics.jsonl -o compare.png
    python jobs/tools/plot.py timeline runs/x/timeline.rank0.json -o timeline.png

metrics: the JSON lines written by `train.py --metrics FILE` (one object per epoch with
"epoch", "loss", "accuracy", "test_accuracy", "samples_per_sec") or `train_gpt.py --metrics
FILE` ("epoch", "loss", "val_loss"); missing keys are left out of the plot. Left panel: loss
per epoch (validation dashed); right panel: training and test accuracy.

timeline: the Chrome-trace file written by `train.py --timeline FILE` (one file per rank),
either a list of events or {"traceEvents": [...]}. Read from it:
  - "bucket <i> ready" spans: from the first to the last gradient of bucket i being ready;
  - "bucket <i> allreduce" spans: from the launch to the completion of its reduction;
  - "backward" spans (optional): the backward pass of each step.
Spans may be complete events (ph "X" with ts and dur) or begin/end pairs (ph "B"/"E");
times are in microseconds. The step is args["step"]; without it, an event belongs to the
backward span it starts in, or to no step. The bucket index is args["bucket"], else the
number in the name. Other events are ignored. With several processes (pid) in one file,
--rank picks one (default: the lowest).
Top panel: one step drawn as a Gantt chart (bars: gradients becoming ready, and the
allreduce in flight). Bottom panel: for every step, when each bucket was ready and when its
allreduce completed, in ms after the start of that step's backward pass; the gap between
the two marks is communication not hidden behind computation.

Needs matplotlib (pip install 'mpigrad[plot]').
"""
import argparse
import json
import re
from collections import defaultdict

BUCKET_EVENT = re.compile(r"^bucket (\d+) (ready|allreduce)$")


def load_metrics(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{number}: not a JSON object per line ({e.msg})")
            if not isinstance(row, dict):
                raise SystemExit(f"{path}:{number}: expected a JSON object, got {row!r:.60}")
            rows.append(row)
    if not rows:
        raise SystemExit(f"{path}: no metrics")
    for i, row in enumerate(rows):
        row.setdefault("epoch", i + 1)
    return rows


def trace_events(path):
    with open(path) as f:
        try:
            trace = json.load(f)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}: not a JSON trace ({e.msg} at line {e.lineno})")
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise SystemExit(f"{path}: expected a list of events or {{\"traceEvents\": [...]}}")
    return [e for e in events if isinstance(e, dict)]


def spans(events):
    """Complete spans (name, pid, start_us, end_us, args) from "X" and "B"/"E" events."""
    out = []
    open_spans = defaultdict(list)  # (pid, tid) -> stack of begin events
    for e in sorted((e for e in events if "ts" in e), key=lambda e: float(e["ts"])):
        ph, ts = e.get("ph"), float(e["ts"])
        if ph == "X":
            out.append((e.get("name", ""), e.get("pid", 0), ts, ts + float(e.get("dur", 0)),
                        e.get("args") or {}))
        elif ph == "B":
            open_spans[e.get("pid", 0), e.get("tid", 0)].append(e)
        elif ph == "E":
            stack = open_spans[e.get("pid", 0), e.get("tid", 0)]
            if stack:
                begin = stack.pop()
                args = dict(begin.get("args") or {}, **(e.get("args") or {}))
                out.append((begin.get("name", e.get("name", "")), begin.get("pid", 0),
                            float(begin["ts"]), ts, args))
    return out


def bucket_steps(events, rank=None):
    """{step: {"backward": (start, end) or None, "buckets": {i: {"ready": (s, e),
    "allreduce": (s, e)}}}} for one process; times in microseconds."""
    all_spans = spans(events)
    pids = sorted({pid for _, pid, _, _, _ in all_spans}, key=str)
    if not pids:
        return {}
    pid = pids[0] if rank is None else rank
    mine = [s for s in all_spans if s[1] == pid]
    backward = sorted((start, end, args.get("step")) for name, _, start, end, args in mine
                      if name == "backward")

    def step_of(start, args):
        if "step" in args:
            return args["step"]
        for k, (b0, b1, step) in enumerate(backward):
            if b0 <= start <= b1:
                return step if step is not None else k
        return None

    steps = {}
    for k, (b0, b1, step) in enumerate(backward):
        steps.setdefault(step if step is not None else k, {"backward": None, "buckets": {}})
        steps[step if step is not None else k]["backward"] = (b0, b1)
    for name, _, start, end, args in mine:
        m = BUCKET_EVENT.match(name)
        if not m:
            continue
        step = step_of(start, args)
        if step is None:
            continue
        bucket = int(args.get("bucket", m.group(1)))
        entry = steps.setdefault(step, {"backward": None, "buckets": {}})
        entry["buckets"].setdefault(bucket, {})[m.group(2)] = (start, end)
    return {s: v for s, v in steps.items() if v["buckets"]}


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("jobs/tools/plot.py needs matplotlib, which is not installed: "
                         "pip install 'mpigrad[plot]'  (or: pip install matplotlib)")
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt
    return plt


def plot_metrics(paths, output):
    runs = [(path, load_metrics(path)) for path in paths]
    plt = import_pyplot()
    from matplotlib.ticker import MaxNLocator

    def series(rows, key):
        points = [(r["epoch"], r[key]) for r in rows if r.get(key) is not None]
        return list(zip(*points)) if points else ([], [])

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    several = len(runs) > 1
    for i, (path, rows) in enumerate(runs):
        loss_ax.plot(*series(rows, "loss"), marker="o", color=f"C{i}",
                     label=path if several else "train")
        x, y = series(rows, "val_loss")
        if x:  # train_gpt.py's validation loss: dashed, in the run's colour
            loss_ax.plot(x, y, "--", marker="o", color=f"C{i}",
                         label=f"validation ({path})" if several else "validation")
        # One colour per run; solid: training accuracy, dashed: test accuracy.
        for key, name, style in (("accuracy", "train", "-"), ("test_accuracy", "test", "--")):
            x, y = series(rows, key)
            if x:
                acc_ax.plot(x, y, style, marker="o",
                            color=f"C{i}" if several else ("C0" if name == "train" else "C1"),
                            label=f"{name} ({path})" if several else name)
    loss_ax.set(title="Training loss", xlabel="epoch", ylabel="loss")
    acc_ax.set(title="Accuracy", xlabel="epoch", ylabel="accuracy")
    for ax in (loss_ax, acc_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    if several or any(series(rows, "val_loss")[0] for _, rows in runs):
        loss_ax.legend(fontsize="small")
    acc_ax.legend(fontsize="small")
    fig.savefig(output, dpi=100)
    plt.close(fig)


def plot_timeline(path, output, rank=None, step=None):
    steps = bucket_steps(trace_events(path), rank)
    if not steps:
        raise SystemExit(f"{path}: no 'bucket <i> ready' / 'bucket <i> allreduce' events "
                         f"(written by train.py --timeline)")
    plt = import_pyplot()
    order = sorted(steps)
    buckets = sorted({b for s in order for b in steps[s]["buckets"]})
    colors = plt.get_cmap("tab10")

    def origin(entry):
        if entry["backward"]:
            return entry["backward"][0]
        return min(t[0] for b in entry["buckets"].values() for t in b.values())

    fig, (gantt, per_step) = plt.subplots(2, 1, figsize=(10, 7), constrained_layout=True,
                                          gridspec_kw={"height_ratios": [1, 1.4]})

    # Top: one step in detail (default: the last one; the first steps include warm-up).
    shown = order[-1] if step is None else step
    if shown not in steps:
        raise SystemExit(f"{path}: no step {shown}; steps are {order[0]}..{order[-1]}")
    entry, t0 = steps[shown], origin(steps[shown])
    ms = lambda t: (t - t0) / 1e3  # noqa: E731
    rows = [f"bucket {b}" for b in buckets]
    if entry["backward"]:
        b0, b1 = entry["backward"]
        gantt.barh(len(rows), ms(b1) - ms(b0), left=ms(b0), color="0.7", height=0.5)
        rows.append("backward")
    for y, b in enumerate(buckets):
        parts = entry["buckets"].get(b, {})
        if "ready" in parts:
            s, e = parts["ready"]
            gantt.barh(y + 0.18, max(ms(e) - ms(s), 1e-3), left=ms(s), height=0.32,
                       color=colors(b % 10), alpha=0.45,
                       label="gradients becoming ready" if y == 0 else None)
        if "allreduce" in parts:
            s, e = parts["allreduce"]
            gantt.barh(y - 0.18, max(ms(e) - ms(s), 1e-3), left=ms(s), height=0.32,
                       color=colors(b % 10), hatch="//", edgecolor="black", linewidth=0.5,
                       label="allreduce in flight" if y == 0 else None)
    gantt.set_yticks(range(len(rows)), rows)
    gantt.set(title=f"Step {shown}: gradient buckets (ms after backward started)",
              xlabel="ms")
    gantt.grid(axis="x", alpha=0.3)
    gantt.legend(fontsize="small", loc="lower right")

    # Bottom: every step, when each bucket was ready and when its allreduce completed.
    xs = list(range(len(order)))
    for b in buckets:
        ready, done = [], []
        for x, s in zip(xs, order):
            parts, t0 = steps[s]["buckets"].get(b, {}), origin(steps[s])
            if "ready" in parts:
                ready.append((x, (parts["ready"][1] - t0) / 1e3))
            if "allreduce" in parts:
                done.append((x, (parts["allreduce"][1] - t0) / 1e3))
        if ready:
            per_step.plot(*zip(*ready), "o", color=colors(b % 10), markersize=3,
                          label=f"bucket {b} ready")
        if done:
            per_step.plot(*zip(*done), "x", color=colors(b % 10), markersize=4,
                          label=f"bucket {b} allreduce done")
    ends = [(x, (steps[s]["backward"][1] - origin(steps[s])) / 1e3)
            for x, s in zip(xs, order) if steps[s]["backward"]]
    if ends:
        per_step.plot(*zip(*ends), "-", color="0.4", linewidth=1, label="end of backward")
    per_step.set(title="Every step: bucket ready (o) and its allreduce completed (x)",
                 xlabel="step", ylabel="ms after backward started")
    if len(xs) <= 20:
        per_step.set_xticks(xs, [str(s) for s in order])
    per_step.grid(alpha=0.3)
    handles = per_step.get_legend_handles_labels()[0]
    per_step.legend(fontsize="small", ncol=2 if len(handles) > 6 else 1, loc="upper left")
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Plot train.py's metrics or DDP's bucket timeline to a PNG file.")
    sub = parser.add_subparsers(dest="kind", required=True)
    m = sub.add_parser("metrics", help="loss and accuracy per epoch from --metrics files")
    m.add_argument("files", nargs="+", help="metrics JSON-lines files")
    m.add_argument("-o", "--output", required=True, help="PNG file to write")
    t = sub.add_parser("timeline", help="bucket readiness against allreduce completion")
    t.add_argument("file", help="a --timeline trace (one rank's file)")
    t.add_argument("-o", "--output", required=True, help="PNG file to write")
    t.add_argument("--rank", type=int, default=None,
                   help="process (pid) to plot when the file holds several")
    t.add_argument("--step", type=int, default=None,
                   help="step drawn in detail in the top panel (default: the last)")
    args = parser.parse_args(argv)
    try:
        if args.kind == "metrics":
            plot_metrics(args.files, args.output)
        else:
            plot_timeline(args.file, args.output, args.rank, args.step)
    except OSError as e:
        raise SystemExit(f"jobs/tools/plot.py: {e}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
