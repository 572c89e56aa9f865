"""Inputs, comparisons and process handling shared by the communication-layer tests."""
import threading
import time

import numpy as np

import mpigrad.distributed as dist


def rank_input(rank, shape, dtype=np.float64, seed=0):
    """Rank `rank`'s input: the same on every rank that asks, different across ranks, so each
    rank can compute the expected result of a collective from all ranks' inputs."""
    rng = np.random.default_rng([seed, rank])
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(1, 6, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def all_inputs(shape, dtype=np.float64, seed=0):
    return [rank_input(r, shape, dtype, seed) for r in range(dist.get_world_size())]


def assert_matches(actual, expected):
    """Exact for integers and bools; floating point within the rounding of a different
    summation order."""
    actual = np.asarray(actual)
    assert actual.dtype == np.asarray(expected).dtype
    if actual.dtype.kind in "fc":
        tol = 1e-5 if actual.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(actual, expected)


def reference_reduce(stacked, op):
    """What reducing the ranks' inputs (stacked along axis 0) with `op` gives, in numpy."""
    if stacked.dtype == np.bool_ and op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT):
        return stacked.any(0) if op is dist.ReduceOp.SUM else stacked.all(0)
    result = {
        dist.ReduceOp.SUM: lambda s: s.sum(0),
        dist.ReduceOp.PRODUCT: lambda s: s.prod(0),
        dist.ReduceOp.MIN: lambda s: s.min(0),
        dist.ReduceOp.MAX: lambda s: s.max(0),
        dist.ReduceOp.BAND: np.bitwise_and.reduce,
        dist.ReduceOp.BOR: np.bitwise_or.reduce,
        dist.ReduceOp.BXOR: np.bitwise_xor.reduce,
        dist.ReduceOp.AVG: lambda s: s.mean(0),
    }[op](stacked)
    return np.asarray(result).astype(stacked.dtype)


def finish(processes, timeout=120):
    """(returncode, stdout, stderr) of each started process (text mode), their pipes read side
    by side, so none stalls on a full pipe while another is waited for. If any is still
    running after `timeout` seconds, every one is killed and an AssertionError names the ones
    that were still running, with the end of each one's output."""
    outputs = [None] * len(processes)

    def read(index, process):
        outputs[index] = process.communicate()

    readers = [threading.Thread(target=read, args=pair, daemon=True)
               for pair in enumerate(processes)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(deadline - time.monotonic(), 0))
    running = [index for index, reader in enumerate(readers) if reader.is_alive()]
    if running:
        for process in processes:
            process.kill()
        for reader in readers:
            reader.join(10)  # a killed process's pipes close, unless a child of it holds them
        report = "\n".join(
            f"process {index} ({'still running, killed' if index in running else 'exited'}):"
            f"\n{_tail(outputs[index])}" for index in range(len(processes)))
        raise AssertionError(f"processes {running} still running after {timeout} s:\n{report}")
    return [(process.returncode, out, err) for process, (out, err) in zip(processes, outputs)]


def _tail(output, characters=2000):
    if output is None:
        return "  (its pipes stayed open)"
    out, err = output
    return f"  stdout: ...{(out or '')[-characters:]}\n  stderr: ...{(err or '')[-characters:]}"


def finish_together(jobs, timeout=120):
    """`finish` for jobs started side by side, `{name: processes}`, waited for together:
    `{name: results}`. On a timeout every process of every job is killed and the first job's
    error raised."""
    outcomes = {}

    def wait(name, processes):
        try:
            outcomes[name] = finish(processes, timeout)
        except BaseException as error:  # handed over to the caller's thread
            outcomes[name] = error

    waiters = [threading.Thread(target=wait, args=job) for job in jobs.items()]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    failures = [outcome for outcome in outcomes.values() if isinstance(outcome, BaseException)]
    if failures:
        for processes in jobs.values():
            for process in processes:
                process.kill()
        raise failures[0]
    return outcomes
