"""`mpigrad.profiler`: torch.profiler's interface over mpigrad's op profiler
(mpigrad/autograd/profiler.py, which records the events).

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler("./log")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))

Without a schedule the whole block is recorded. With one, step `prof.step()` has just
ended is given an action: nothing, warm up (recording, then discarded), record, or record
and save, which ends a cycle: the events of its warm-up-free steps are handed to
`on_trace_ready(prof)` and are what `key_averages()` and `events()` answer until the next
cycle. Only the CPU is profiled: another activity is warned about and left out, as torch's
CPU build does.
"""
import enum
import os
import socket
import time
import warnings

from ..autograd import profiler as _recorder
from ..autograd.profiler import record_function  # noqa: F401

__all__ = ["profile", "record_function", "schedule", "ProfilerAction", "ProfilerActivity",
           "tensorboard_trace_handler"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


_RECORDING = (ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """The action for each step: `skip_first` steps of nothing, then cycles of `wait` steps
    of nothing, `warmup` of warming up and `active` of recording (the last of which saves),
    `repeat` times (0: forever). With `skip_first_wait`, the first cycle has no wait."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(f"Invalid profiler schedule arguments: wait={wait}, "
                             f"warmup={warmup} (>= 0), active={active} (> 0), "
                             f"repeat={repeat}, skip_first={skip_first} (>= 0)")
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results",
                      stacklevel=2)

    def action(step):
        if step < 0:
            raise ValueError(f"a profiler step is >= 0, got {step}")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait
        cycle = wait + warmup + active
        if repeat > 0 and step / cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return (ProfilerAction.RECORD if position < cycle - 1
                else ProfilerAction.RECORD_AND_SAVE)
    return action


def _always_record(step):
    return ProfilerAction.RECORD


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An `on_trace_ready` that writes each saved cycle as a Chrome trace,
    `dir_name/<worker>.<milliseconds>.pt.trace.json` (TensorBoard's profiler plugin and
    Perfetto read it); `worker_name` defaults to host name and pid."""
    if use_gzip:
        raise NotImplementedError("tensorboard_trace_handler: use_gzip is not supported")

    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        prof.export_chrome_trace(os.path.join(
            dir_name, f"{worker}.{time.time_ns() // 1_000_000}.pt.trace.json"))
    return handler


class profile:
    """torch.profiler.profile: a context manager (or `start()`/`stop()`) recording the ops,
    backward nodes and `record_function` ranges of every thread; `step()` marks a step's
    end for the schedule."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False,
                 with_flops=False, with_modules=False, experimental_config=None,
                 execution_trace_observer=None, acc_events=False, use_cuda=None):
        for activity in activities or ():
            if activity is not ProfilerActivity.CPU:
                warnings.warn(f"profiling {activity} is not supported: mpigrad runs on the CPU "
                              "only; recording the CPU", stacklevel=2)
        self.schedule = schedule or _always_record
        self.on_trace_ready = on_trace_ready
        self._options = dict(record_shapes=record_shapes, profile_memory=profile_memory,
                             with_stack=with_stack)
        self.step_num = 0
        self.current_action = None
        self.profiler = None  # the recorder of the current (or last saved) cycle
        self._recording = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        self.current_action = self.schedule(self.step_num)
        self._enter(self.current_action)

    def stop(self):
        if self._recording is not None:
            self._finish_cycle(save=True)
        self.current_action = None

    def step(self):
        """The end of a step: move to the next step's action."""
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if previous == ProfilerAction.RECORD_AND_SAVE or (
                previous in _RECORDING and self.current_action not in _RECORDING):
            self._finish_cycle(save=previous != ProfilerAction.WARMUP)
        elif previous == ProfilerAction.WARMUP and self.current_action != ProfilerAction.WARMUP:
            self._recording.function_events.clear()  # warm-up events are not kept
        self._enter(self.current_action)

    def _enter(self, action):
        if action in _RECORDING and self._recording is None:
            self._recording = _recorder.profile(**self._options)
            self._recording.__enter__()

    def _finish_cycle(self, save):
        recording, self._recording = self._recording, None
        recording.__exit__(None, None, None)
        if save:
            self.profiler = recording
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)

    def _results(self):
        if self.profiler is None:
            raise RuntimeError("the profiler has recorded no complete cycle yet")
        return self.profiler

    def events(self):
        return self._results().events()

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self._results().key_averages(group_by_input_shape)

    def export_chrome_trace(self, path):
        self._results().export_chrome_trace(path)
