"""A Chrome-trace timeline of DistributedDataParallel's gradient reduction.

Open the file in https://ui.perfetto.dev or chrome://tracing. Each rank is a process
(`pid` = rank); track 0 shows every backward pass and a "step" summary, track i+1 shows
bucket i: when its gradients became ready (first to last) and when its reduction was launched
and completed. Completion is observed when the reducer tests the request (at the next
gradient hook, or while waiting at the end of backward), so it is an upper bound.

Turn it on for every DDP model with the environment variable

    MPIGRAD_TIMELINE=/path/trace.json      -> /path/trace.rank0.json, /path/trace.rank1.json ...
    MPIGRAD_TIMELINE=/path/trace.{rank}.json   ({rank} is replaced by the rank)

or per model with `DistributedDataParallel(..., timeline=path)` / `ddp.enable_timeline(path)`.
The file is written as the job runs: each step's events are appended when the step ends, and
the file is valid JSON after every write (the closing brackets are rewritten behind the new
events), so memory stays flat however long the job runs and a job that is killed keeps its
trace up to its last finished step. Without a path the events stay in memory, the newest
`MEMORY_EVENTS` of them.

The per-step summary event carries `backward_ms` (first gradient hook to the end-of-backward
callback), `comm_ms` (the time during which at least one bucket's reduction was in flight),
`hidden_fraction` (the part of comm_ms that fell inside backward) and `wait_ms` (what the
end-of-backward callback spent waiting). `summarize(events)` reads them back.
"""
import atexit
import collections
import errno
import json
import os
import weakref

ENV = "MPIGRAD_TIMELINE"
MEMORY_EVENTS = 100_000

_HEADER = b'{"displayTimeUnit": "ms", "traceEvents": [\n'
_CLOSING = b"\n]}\n"

__all__ = ["Timeline", "timeline_path", "summarize", "hidden_fraction", "ENV"]


def timeline_path(template, rank):
    """`template` with `{rank}` replaced, or with `.rank{rank}` inserted before the extension."""
    if "{rank}" in template:
        return template.replace("{rank}", str(rank))
    root, ext = os.path.splitext(template)
    return f"{root}.rank{rank}{ext or '.json'}"


def _union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def hidden_fraction(backward, intervals):
    """(comm seconds, fraction of it inside `backward`=(start, end)) for the union of the
    communication `intervals`."""
    merged = _union(intervals)
    total = sum(end - start for start, end in merged)
    if total <= 0:
        return 0.0, 1.0
    b0, b1 = backward
    inside = sum(max(0.0, min(end, b1) - max(start, b0)) for start, end in merged)
    return total, inside / total


class Timeline:
    """Trace events of one rank, appended to `path` (already per rank) at the end of every
    step; with `path` None kept in `events` (the newest MEMORY_EVENTS)."""

    _live = weakref.WeakSet()

    def __init__(self, path, rank):
        self.path = path
        self.rank = rank
        # With a file, `events` only holds what the current step has not written yet.
        self.events = collections.deque(maxlen=None if path else MEMORY_EVENTS)
        self.events.extend([
            {"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
             "args": {"name": f"rank {rank}"}},
            {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0,
             "args": {"name": "backward / step"}},
        ])
        self._named_tracks = set()
        self._file = None
        if path is not None:
            directory = os.path.dirname(path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._file = _create_without_following(path)
            self._file.write(_HEADER + _CLOSING)
            self._first = True
            self.flush()
        Timeline._live.add(self)

    @staticmethod
    def _us(t):
        # perf_counter microseconds, not time since this timeline began: the autograd
        # profiler writes the same clock, so the two traces line up when merged.
        return round(t * 1e6, 3)

    def _span(self, name, tid, start, end, args=None):
        event = {"name": name, "ph": "X", "pid": self.rank, "tid": tid,
                 "ts": self._us(start), "dur": round(max(0.0, end - start) * 1e6, 3)}
        if args:
            event["args"] = args
        self.events.append(event)

    def record_step(self, step, backward, buckets, finalize_end, wait_seconds):
        """`backward` = (start, end) perf_counter seconds; `buckets` = dicts with index,
        nbytes, params (names), ready=(first, last), launched, completed."""
        for b in buckets:
            tid = b["index"] + 1
            if tid not in self._named_tracks:
                self._named_tracks.add(tid)
                self.events.append({"name": "thread_name", "ph": "M", "pid": self.rank,
                                    "tid": tid, "args": {"name": f"bucket {b['index']}"}})
            self._span(f"bucket {b['index']} ready", tid, *b["ready"],
                       {"step": step, "params": b["params"]})
            self._span(f"bucket {b['index']} allreduce", tid, b["launched"], b["completed"],
                       {"step": step, "bytes": b["nbytes"]})
        comm, hidden = hidden_fraction(backward, [(b["launched"], b["completed"])
                                                  for b in buckets])
        self._span("backward", 0, *backward, {"step": step})
        self._span("step", 0, backward[0], finalize_end,
                   {"step": step, "backward_ms": (backward[1] - backward[0]) * 1e3,
                    "comm_ms": comm * 1e3, "hidden_fraction": hidden,
                    "wait_ms": wait_seconds * 1e3})
        self.flush()

    def flush(self):
        """Append the buffered events to the file (one write, ending with the closing
        brackets, so the file parses after every flush); nothing to do without a file."""
        if self._file is None or not self.events:
            return
        text = ",\n".join(json.dumps(event) for event in self.events).encode("utf-8")
        self._file.seek(-len(_CLOSING), os.SEEK_END)
        self._file.write((b"" if self._first else b",\n") + text + _CLOSING)
        self._file.flush()
        self._first = False
        self.events.clear()

    def close(self):
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None


def summarize(events):
    """The per-step summaries (dicts with step, backward_ms, comm_ms, hidden_fraction,
    wait_ms) from a list of trace events or a loaded trace dict."""
    if isinstance(events, dict):
        events = events["traceEvents"]
    return [dict(e["args"]) for e in events if e.get("ph") == "X" and e.get("name") == "step"]


@atexit.register
def _flush_all():
    for timeline in list(Timeline._live):
        try:
            timeline.flush()
        except OSError:
            pass


def _create_without_following(path):
    """`path` opened for writing, refusing a symbolic link there: per-rank paths are often in
    shared directories, where a planted link would make every rank overwrite its target."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OSError(err.errno, f"the timeline path {path} is a symbolic link; mpigrad "
                                     "does not write through one: remove it or choose another "
                                     "path") from None
        raise
    return os.fdopen(descriptor, "wb")
