"""Timeline, communication hooks and Join."""
import json

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
from mpigrad.distributed.algorithms import Join
from mpigrad.distributed.algorithms.ddp_comm_hooks import (TopKState, allreduce_hook,
                                                           fp16_compress_hook, topk_hook)
from mpigrad.distributed.ddp.timeline import summarize, timeline_path
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

from ._models import MLP, blobs, cross_entropy, mse, params_of, regression_data


# ---------------------------------------------------------------------- timeline
def test_timeline_path_forms():
    assert timeline_path("/t/trace.json", 3) == "/t/trace.rank3.json"
    assert timeline_path("/t/trace-{rank}.json", 1) == "/t/trace-1.json"
    assert timeline_path("/t/trace", 0) == "/t/trace.rank0.json"


@pytest.mark.mpi(min_size=2)
def test_timeline_is_chrome_trace_with_bucket_events(rank, tmp_path, monkeypatch):
    path = str(tmp_path / "trace.json")
    monkeypatch.setenv("MPIGRAD_TIMELINE", path)
    model = DDP(MLP(seed=0), bucket_cap_mb=0)
    steps = 2
    for s in range(steps):
        x, y = regression_data(4, seed=10 * s + rank)
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    model.timeline.flush()
    with open(timeline_path(path, rank)) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    assert all(e["pid"] == rank for e in events)
    spans = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in spans)
    n_buckets = len(model.reducer.buckets)
    for i in range(n_buckets):
        assert sum(e["name"] == f"bucket {i} allreduce" for e in spans) == steps
        assert sum(e["name"] == f"bucket {i} ready" for e in spans) == steps
    summary = summarize(trace)
    assert [s["step"] for s in summary] == list(range(steps))
    for s in summary:
        assert 0 <= s["hidden_fraction"] <= 1 and s["backward_ms"] > 0 and s["comm_ms"] > 0
    # Allreduce launched no earlier than its bucket's last gradient was ready.
    for i in range(n_buckets):
        ready = [e for e in spans if e["name"] == f"bucket {i} ready"]
        launched = [e for e in spans if e["name"] == f"bucket {i} allreduce"]
        for r, a in zip(ready, launched):
            assert a["ts"] + 1e-3 >= r["ts"] + r["dur"]


# ---------------------------------------------------------------------- comm hooks
def train_classifier(rank, size, hook=None, state=None, steps=40):
    x, labels = blobs(64 * size, seed=3, classes=4, spread=0.8)
    per = 64
    xs, ls = x[rank * per:(rank + 1) * per], labels[rank * per:(rank + 1) * per]
    model = DDP(MLP(sizes=(8, 16, 4), seed=1), bucket_cap_mb=0)
    if hook is not None:
        model.register_comm_hook(state, hook)
    opt = SGD(model.parameters(), lr=0.2, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        cross_entropy(model(mg.tensor(xs)), ls).backward()
        opt.step()
    test_x, test_labels = blobs(64 * size + 400, seed=3, classes=4, spread=0.8)
    test_x, test_labels = test_x[-400:], test_labels[-400:]
    with mg.no_grad():
        predicted = model.module(mg.tensor(test_x))._array.argmax(1)
    return float((predicted == test_labels).mean()), params_of(model)


@pytest.mark.mpi(min_size=2)
def test_default_hook_explicitly_registered_is_the_default(rank, size):
    acc_default, p_default = train_classifier(rank, size, steps=5)
    acc_hook, p_hook = train_classifier(rank, size, allreduce_hook, None, steps=5)
    for a, b in zip(p_default, p_hook):
        assert np.array_equal(a, b)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", ["fp16", "topk"])
def test_compression_hooks_train_nearly_as_well(rank, size, name):
    hook, state = {"fp16": (fp16_compress_hook, None),
                   "topk": (topk_hook, TopKState(ratio=0.25))}[name]
    acc_default, _ = train_classifier(rank, size)
    acc, params = train_classifier(rank, size, hook, state)
    assert acc_default > 0.6  # chance is 0.25
    assert acc >= acc_default - 0.05, (acc, acc_default)
    flat = np.concatenate([p.ravel() for p in params])
    everyone = MPI.COMM_WORLD.allgather(flat)
    assert all(np.array_equal(f, flat) for f in everyone)
    if name == "topk":
        assert state.residuals and any(np.abs(r).sum() > 0 for r in state.residuals.values())


def one_backward_grads(rank, hook):
    """The gradients after one DDP backward with `hook` (the default reduction if None), one
    bucket per parameter."""
    model = DDP(MLP(seed=0), bucket_cap_mb=0)
    if hook is not None:
        model.register_comm_hook(None, hook)
    x, y = regression_data(4, seed=rank)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    return [p.grad._array.copy() for p in model.parameters()]


@pytest.mark.mpi(min_size=2)
def test_fp16_hook_gradient_is_close_to_exact(rank, size):
    for exact, half in zip(one_backward_grads(rank, None),
                           one_backward_grads(rank, fp16_compress_hook)):
        np.testing.assert_allclose(half, exact, rtol=2e-3, atol=2e-3)
        assert not np.array_equal(half, exact) or np.all(exact == 0)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("as_view", [False, True], ids=["copy", "bucket-view"])
def test_hook_returning_a_new_array_fills_grad(rank, size, as_view):
    """A hook whose result is a fresh array (not the bucket buffer): the reducer copies it
    into `.grad`, for copied buckets and for in-place ones (whose buffer is `.grad`)."""
    def out_of_place(state, bucket):
        buf = bucket.buffer()
        out = np.empty_like(buf)
        request = bucket.comm.Iallreduce(buf, out, MPI.SUM)
        state.append(bucket.index())
        return bucket.future("out_of_place", [request], lambda: out)

    def grads(hook):
        # 300 bytes: w1 is reduced in place, the other parameters are copied into buckets.
        model = DDP(MLP(seed=0), bucket_cap_mb=300 / 2**20, gradient_as_bucket_view=as_view)
        calls, expected = [], []
        if hook is not None:
            model.register_comm_hook(calls, hook)
            assert any(b.in_place for b in model.reducer.buckets)
            assert not all(b.in_place for b in model.reducer.buckets)
        for s in range(2):  # the layout may change after step 0 (the rebuild)
            expected += range(len(model.reducer.buckets))
            model.zero_grad()
            x, y = regression_data(4, seed=10 * s + rank)
            mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        if hook is not None:
            assert calls == expected
        return [p.grad._array.copy() for p in model.parameters()]
    for exact, got in zip(grads(None), grads(out_of_place)):
        np.testing.assert_allclose(got, exact, rtol=1e-14, atol=1e-15)


@pytest.mark.mpi(min_size=2)
def test_hook_chained_with_then(rank, size):
    """A hook may return any Future: here `then` on the default hook's Work, as torch's hooks
    post-process with `fut.then(...)`; the Reducer waits for it and uses its value."""
    def doubled_then_halved(state, bucket):
        bucket.buffer()[:] *= 2
        return allreduce_hook(state, bucket).then(lambda fut: fut.value() / 2)

    for exact, got in zip(one_backward_grads(rank, None),
                          one_backward_grads(rank, doubled_then_halved)):
        np.testing.assert_allclose(got, exact, rtol=1e-14, atol=1e-15)


# ---------------------------------------------------------------------- join
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_cap_mb", [25, 0], ids=["whole-model", "in-place"])
@pytest.mark.parametrize("with_buffer", [False, True])
def test_join_uneven_batches_matches_oracle(rank, size, with_buffer, bucket_cap_mb):
    """Rank r has 1 + r batches. Each step averages the active ranks' gradients over the full
    world size; after Join every rank holds the model of the ranks that trained to the end."""
    counts = [1 + r for r in range(size)]

    def build(seed):
        m = MLP(seed=seed)
        if with_buffer:
            m.register_buffer("scale", mg.tensor(np.array([1.0 + seed])))
        return m

    def data(r, s):
        return regression_data(4, seed=100 * s + r)

    def loss_of(m, x, y):
        out = m(mg.tensor(x))
        if with_buffer:
            out = out * m.scale
        return mse(out, mg.tensor(y))

    inner = build(rank)
    model = DDP(inner, bucket_cap_mb=bucket_cap_mb)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    with Join([model]):
        for s in range(counts[rank]):
            opt.zero_grad()
            x, y = data(rank, s)
            out = model(mg.tensor(x))
            if with_buffer:
                out = out * inner.scale
            mse(out, mg.tensor(y)).backward()
            opt.step()

    ref = build(0)
    ref_opt = SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for s in range(max(counts)):
        ref_opt.zero_grad()
        total = 0
        for r in range(size):
            if s < counts[r]:
                total = total + loss_of(ref, *data(r, s))
        (total / size).backward()
        ref_opt.step()
    for got, want in zip(params_of(model), params_of(ref)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    flat = np.concatenate([p.ravel() for p in params_of(model)])
    everyone = MPI.COMM_WORLD.allgather(flat)
    assert all(np.array_equal(f, flat) for f in everyone)
    # The model keeps working normally after the Join.
    x, y = regression_data(4, seed=rank)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
