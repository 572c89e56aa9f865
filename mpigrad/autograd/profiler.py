"""Profiler: which op took the time, and how much memory it kept (torch.autograd.profiler).

    with profile(record_shapes=True, profile_memory=True) as prof:
        with record_function("train step"):
            loss = model(x).sum()
            loss.backward()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")        # https://ui.perfetto.dev

While a profile is recording, every op's forward is an event named after the op ("matmul",
"add", "relu"), every node backward runs is one named after the node ("MatmulBackward",
"AccumulateGrad"), on the thread that ran it, and `record_function` adds named ranges of
your own. An event's self time is its time minus its children's; its memory (with
`profile_memory`) is the net bytes that stayed allocated across it, from tracemalloc, which
numpy reports its buffers to (so tracing slows allocation down while it is on). tracemalloc
counts the whole process: with several threads allocating at once, each event's memory also
holds what the others allocated meanwhile.

Timestamps are `time.perf_counter()` (CLOCK_MONOTONIC: one clock for every process on a
node), written to the Chrome trace in microseconds, so traces of several ranks, and of
DistributedDataParallel's timeline (the same clock), line up when merged.

When no profile is recording, an op pays one attribute read.
"""
import functools
import json
import os
import threading
import time
import traceback
import tracemalloc

from . import engine

# The profile that is recording, or None. One at a time, for the whole process (as torch).
active = None
_lock = threading.Lock()


def _shapes(args):
    """Input shapes as torch lists them: one list per argument, [] for a non-tensor."""
    shapes = []
    for a in args:
        if isinstance(a, (tuple, list)):
            shapes.extend(list(x.shape) if hasattr(x, "shape") else [] for x in a)
        elif hasattr(a, "shape"):
            shapes.append(list(a.shape))
    return shapes


class FunctionEvent:
    """One recorded event: a forward op, a backward node, or a record_function range."""

    __slots__ = ("name", "thread", "start_ns", "end_ns", "input_shapes", "stack", "mem_start",
                 "cpu_memory_usage", "children_ns", "children_memory", "__weakref__")

    def __init__(self, name, thread, input_shapes, stack, mem_start):
        self.name = name
        self.thread = thread
        self.input_shapes = input_shapes
        self.stack = stack
        self.mem_start = mem_start
        self.start_ns = time.perf_counter_ns()
        self.end_ns = None
        self.cpu_memory_usage = 0
        self.children_ns = 0
        self.children_memory = 0

    @property
    def key(self):
        return self.name

    @property
    def cpu_time_total(self):
        """Microseconds, children included."""
        return (self.end_ns - self.start_ns) / 1e3

    @property
    def self_cpu_time_total(self):
        return (self.end_ns - self.start_ns - self.children_ns) / 1e3

    @property
    def self_cpu_memory_usage(self):
        return self.cpu_memory_usage - self.children_memory

    def __repr__(self):
        return (f"<FunctionEvent {self.name} thread={self.thread} "
                f"cpu_time_total={self.cpu_time_total:.1f}us>")


class profile:
    """Record ops, backward nodes and record_function ranges on every thread while active."""

    def __init__(self, enabled=True, record_shapes=False, profile_memory=False,
                 with_stack=False):
        self.enabled = enabled
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.function_events = []
        self._open = threading.local()  # this thread's stack of unfinished events
        self._started_tracemalloc = False

    def __enter__(self):
        global active
        if not self.enabled:
            return self
        with _lock:
            if active is not None:
                raise RuntimeError("a profiler is already recording; profiles do not nest")
            if self.profile_memory and not tracemalloc.is_tracing():
                tracemalloc.start()
                self._started_tracemalloc = True
            active = self
            engine.observer = self.run
        return self

    def __exit__(self, *exc):
        global active
        if not self.enabled:
            return False
        with _lock:
            active = None
            engine.observer = None
            if self._started_tracemalloc:
                tracemalloc.stop()
        return False

    # ------------------------------------------------------------- recording
    def _stack(self):
        stack = getattr(self._open, "stack", None)
        if stack is None:
            stack = self._open.stack = []
        return stack

    def begin(self, name, args=()):
        stack = self._stack()
        event = FunctionEvent(
            name, threading.get_native_id(),
            _shapes(args) if self.record_shapes else None,
            traceback.format_stack(limit=12)[:-2] if self.with_stack else None,
            tracemalloc.get_traced_memory()[0] if self.profile_memory else 0)
        stack.append(event)
        return event

    def end(self, event):
        event.end_ns = time.perf_counter_ns()
        if self.profile_memory:
            event.cpu_memory_usage = tracemalloc.get_traced_memory()[0] - event.mem_start
        stack = self._stack()
        if stack and stack[-1] is event:
            stack.pop()
        if stack:
            parent = stack[-1]
            parent.children_ns += event.end_ns - event.start_ns
            parent.children_memory += event.cpu_memory_usage
        self.function_events.append(event)

    def run(self, name, fn, *args):
        """`fn(*args)` recorded as one event named `name`."""
        event = self.begin(name, args)
        try:
            return fn(*args)
        finally:
            self.end(event)

    # ------------------------------------------------------------- results
    def events(self):
        return EventList(sorted(self.function_events, key=lambda e: e.start_ns))

    def key_averages(self, group_by_input_shape=False):
        return self.events().key_averages(group_by_input_shape)

    def table(self, **kwargs):
        return self.key_averages().table(**kwargs)

    def export_chrome_trace(self, path):
        """A Chrome trace (Perfetto, chrome://tracing): one track per thread."""
        pid = os.getpid()
        trace = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                  "args": {"name": f"mpigrad profiler (pid {pid})"}}]
        for e in self.events():
            args = {}
            if e.input_shapes is not None:
                args["Input Dims"] = e.input_shapes
            if self.profile_memory:
                args["CPU Mem"] = e.cpu_memory_usage
                args["Self CPU Mem"] = e.self_cpu_memory_usage
            if e.stack is not None:
                args["Call stack"] = "".join(e.stack)
            trace.append({"name": e.name, "ph": "X", "cat": "cpu_op", "pid": pid,
                          "tid": e.thread, "ts": e.start_ns / 1e3,
                          "dur": (e.end_ns - e.start_ns) / 1e3, "args": args})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)


class record_function:
    """A named range in the profile (a context manager or a decorator); free when none runs."""

    def __init__(self, name, args=None):
        self.name = name if args is None else f"{name}({args})"
        self._event = None
        self._profile = None

    def __enter__(self):
        self._profile = active
        if self._profile is not None:
            self._event = self._profile.begin(self.name)
        return self

    def __exit__(self, *exc):
        if self._event is not None:
            self._profile.end(self._event)
            self._event = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)
        return wrapper


class FunctionEventAvg:
    """Events of one name (and shapes) added up; times in microseconds, memory in bytes."""

    def __init__(self, key, input_shapes):
        self.key = key
        self.input_shapes = input_shapes
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0

    def add(self, event):
        self.count += 1
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        self.cpu_memory_usage += event.cpu_memory_usage
        self.self_cpu_memory_usage += event.self_cpu_memory_usage

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count

    def __repr__(self):
        return (f"<FunctionEventAvg {self.key} count={self.count} "
                f"self_cpu_time_total={self.self_cpu_time_total:.1f}us>")


_SORT_KEYS = ("cpu_time_total", "self_cpu_time_total", "cpu_memory_usage",
              "self_cpu_memory_usage", "count", "cpu_time")


class EventList(list):
    def key_averages(self, group_by_input_shape=False):
        groups = {}
        for e in self:
            shapes = str(e.input_shapes) if group_by_input_shape else None
            key = (e.name, shapes)
            if key not in groups:
                groups[key] = FunctionEventAvg(e.name, shapes)
            groups[key].add(e)
        averages = EventList(groups.values())
        averages._profile_memory = any(e.cpu_memory_usage for e in self)
        averages._by_shape = group_by_input_shape
        return averages

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, header=None):
        """torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
        (CPU Mem, Self CPU Mem,) # of Calls (, Input Shapes)."""
        rows = list(self)
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(f"sort_by must be one of {_SORT_KEYS}, got {sort_by!r}")
            rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        if row_limit is not None and row_limit > 0:
            rows = rows[:row_limit]
        total_self = self.self_cpu_time_total or 1.0
        memory = getattr(self, "_profile_memory", False)
        by_shape = getattr(self, "_by_shape", False)
        name_width = min(max_name_column_width, max([len("Name")] + [len(r.key) for r in rows]))
        columns = [("Name", name_width), ("Self CPU %", 12), ("Self CPU", 12),
                   ("CPU total %", 12), ("CPU total", 12), ("CPU time avg", 12)]
        if memory:
            columns += [("CPU Mem", 12), ("Self CPU Mem", 12)]
        columns += [("# of Calls", 12)]
        if by_shape:
            columns += [("Input Shapes", 40)]
        line = "  ".join("-" * w for _, w in columns)
        out = [] if header is None else [header]
        out += [line, "  ".join(f"{n:>{w}}" for n, w in columns), line]
        for r in rows:
            cells = [_truncate(r.key, name_width),
                     f"{100 * r.self_cpu_time_total / total_self:.2f}%",
                     _time(r.self_cpu_time_total),
                     f"{100 * r.cpu_time_total / total_self:.2f}%",
                     _time(r.cpu_time_total), _time(r.cpu_time)]
            if memory:
                cells += [_bytes(r.cpu_memory_usage), _bytes(r.self_cpu_memory_usage)]
            cells.append(str(r.count))
            if by_shape:
                cells.append(_truncate(str(r.input_shapes), 40))
            out.append("  ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, columns)))
        out += [line, f"Self CPU time total: {_time(self.self_cpu_time_total)}", ""]
        return "\n".join(out)


def _truncate(text, width):
    return text if len(text) <= width else text[:width - 3] + "..."


def _time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _bytes(n):
    for unit, size in (("Gb", 2 ** 30), ("Mb", 2 ** 20), ("Kb", 2 ** 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} b"
