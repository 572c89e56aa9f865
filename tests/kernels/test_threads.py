"""Threads: torch's set_num_threads family (values, errors, the defaults a process starts
with), the compiled loops' threaded twins against their serial ones (bit for bit), and the
guards: several Python threads entering threaded loops at once, and DataLoader workers
forked after a threaded loop ran."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.kernels import threads
from mpigrad.launchers import ranks_on_node

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(program, **variables):
    """`program`'s last printed line, as JSON, from a new process with `variables` set (None
    removes one) and every launcher and thread variable of this one removed."""
    environ = {name: value for name, value in os.environ.items()
               if not name.startswith(("PMI_", "MPI_LOCAL", "OMPI_", "SLURM_", "HYDI_"))
               and name not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                "LOCAL_WORLD_SIZE")}
    environ["PYTHONPATH"] = os.pathsep.join([ROOT, environ.get("PYTHONPATH", "")])
    environ.update({name: value for name, value in variables.items() if value is not None})
    # A few seconds each (a cold compile of their loops included); a hang fails in minutes,
    # not in the whole run's time
    done = subprocess.run([sys.executable, "-c", program], env=environ, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the settings, against torch ---------------------------------------------------------

def _error(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001  (the type itself is compared)
        return type(error), str(error)
    return None


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True, None])
def test_set_num_threads_refuses_what_torch_refuses(bad, restore_threads):
    ours = _error(lambda: mg.set_num_threads(bad))
    theirs = _error(lambda: torch.set_num_threads(bad))
    assert ours is not None and ours == theirs


def test_set_num_threads_takes_any_positive_int(restore_threads):
    for n in (3, np.int64(2), 1):
        mg.set_num_threads(n)
        assert mg.get_num_threads() == n and type(mg.get_num_threads()) is int


def test_interop_threads_are_set_once_as_in_torch():
    program = """
import json
import {module} as m
out = [m.get_num_interop_threads()]
for bad in (0, 1.5, None):
    try:
        m.set_num_interop_threads(bad)
    except Exception as error:
        out.append([type(error).__name__, str(error)])
m.set_num_interop_threads(3)
out.append(m.get_num_interop_threads())
try:
    m.set_num_interop_threads(2)
except Exception as error:
    out.append([type(error).__name__, str(error)])
print(json.dumps(out))
"""
    ours = _run(program.format(module="mpigrad"))
    theirs = _run(program.format(module="torch"))
    assert ours[1:] == theirs[1:]
    assert ours[0] == threads.cpus()


# --- the default a process starts with ---------------------------------------------------

def test_default_from_variables_and_launchers(monkeypatch):
    everything = set(range(os.cpu_count()))
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: everything)
    monkeypatch.setattr(threads, "cpus", lambda: 6)
    assert threads.default_threads({}) == 6
    assert threads.default_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert threads.default_threads({"OMP_NUM_THREADS": " 5,2"}) == 5  # OpenMP's nesting list
    assert threads.default_threads({"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "2"}) == 2
    # several ranks on the node, none bound to its own cores: one thread each
    assert threads.default_threads({"MPI_LOCALNRANKS": "2"}) == 1
    assert threads.default_threads({"MPI_LOCALNRANKS": "1"}) == 6
    assert threads.default_threads({"MPI_LOCALNRANKS": "4", "OMP_NUM_THREADS": "2"}) == 2
    # a launcher that bound each rank to cores of its own: all of them
    if os.cpu_count() > 1:
        monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0})
        assert threads.default_threads({"MPI_LOCALNRANKS": "2"}) == 6
    for bad in ("0", "two", "-1", ","):
        with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
            threads.default_threads({"OMP_NUM_THREADS": bad})


def test_cores_count_hyperthreads_once(monkeypatch, tmp_path):
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings)
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0, 1, 2, 3})
    assert threads.cpus(str(tmp_path)) == 2
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0, 2})
    assert threads.cpus(str(tmp_path)) == 1
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0, 7})  # no topology for cpu 7
    assert threads.cpus(str(tmp_path)) == 2


def test_ranks_on_node_from_each_launcher():
    assert ranks_on_node({}) is None
    assert ranks_on_node({"LOCAL_WORLD_SIZE": "4"}) == 4
    assert ranks_on_node({"MPI_LOCALNRANKS": "2"}) == 2
    assert ranks_on_node({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}) == 3
    slurm = {"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}
    assert ranks_on_node(slurm) == 1
    assert ranks_on_node(dict(slurm, SLURM_NODEID="2")) == 2


DEFAULTS = """
import json
import threadpoolctl
import mpigrad
blas = [pool["num_threads"] for pool in threadpoolctl.threadpool_info()
        if pool["user_api"] == "blas"]
print(json.dumps([mpigrad.get_num_threads(), blas]))
"""


def test_a_new_process_starts_with_the_default():
    # (numpy's BLAS read OMP_NUM_THREADS itself when it loaded, capped at the CPUs)
    assert _run(DEFAULTS, OMP_NUM_THREADS="3")[0] == 3
    cores = _run(DEFAULTS)[0]
    assert cores == threads.cpus()
    # under mpiexec with two ranks here and no variable: one thread, numpy's BLAS too
    assert _run(DEFAULTS, MPI_LOCALNRANKS="2", PMI_RANK="0") == [1, [1]]


def test_a_malformed_variable_is_an_error_naming_it():
    environ = dict(os.environ, OMP_NUM_THREADS="many", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", "import mpigrad"], env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "OMP_NUM_THREADS='many'" in done.stderr


def test_set_num_threads_sets_numpys_blas(restore_threads):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    for n in (2, 1):
        mg.set_num_threads(n)
        assert {pool["num_threads"] for pool in threadpoolctl.threadpool_info()
                if pool["user_api"] == "blas"} == {n}


# --- the threaded loops against the serial ones -------------------------------------------

# The norms' and attention's threaded loops are checked in float32 only. Threads split their
# rows, channels or (batch, head) units the same way whatever the dtype, and each unit runs
# the serial loop's code, so float32 proves the split; what float64 changes is the
# arithmetic, which tests/kernels/test_normalization.py and test_attention.py hold to torch.
# Each dtype is one more cold compile of a serial loop and of its threaded form (a row
# driver, about 0.3 s, or a threaded twin, 1-4 s), and CI compiles them all.

def _kernels():
    from mpigrad.kernels.compiled import (activations, attention, clip, dropout, elementwise,
                                          indexing, loss, normalization, optim, recurrent,
                                          reduction, resampling, softmax)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(1001) * 3
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -30.0, 30.0]
    g = rng.standard_normal(1001)
    rows = rng.standard_normal((37, 29)) * 4
    rows[3] = -np.inf  # a row that is -inf everywhere
    target = rng.integers(0, 29, 37)
    target[5] = -100
    grow = rng.standard_normal(37)
    weight = rng.random(29) + 0.5
    gates = [rng.standard_normal((23, 4 * 11)), rng.standard_normal((23, 4 * 11)),
             rng.standard_normal((23, 11))]
    gru = [rng.standard_normal((23, 3 * 11)), rng.standard_normal((23, 3 * 11)),
           rng.standard_normal((23, 11))]
    bias = rng.standard_normal(44)
    state = rng.standard_normal((23, 2 * 11))  # [h, c]
    saved = np.concatenate([state, rng.random((23, 4 * 11))], 1)  # [h, c, gates in (0, 1)]
    saved_grad = rng.standard_normal(saved.shape)
    gru_saved = np.concatenate([gru[2], rng.random((23, 3 * 11)), gru[2]], 1)  # h, r, z, n, hn
    positions = rng.integers(0, 13, 300)
    positions[:20] = 4  # repeated: every occurrence adds, in order
    scattered = rng.standard_normal((3, 300, 7))

    f32 = np.float32
    cases = []
    for name in ("gelu_f32", "gelu_tanh", "silu_f32", "sigmoid_f32"):
        cases.append((getattr(activations, name), lambda: [x.astype(f32), np.empty(x.size, f32)]))
    for name in ("gelu_backward_f32", "gelu_tanh_backward", "silu_backward_f32",
                 "sigmoid_backward"):
        cases.append((getattr(activations, name),
                      lambda: [g.astype(f32), x.astype(f32), np.empty(x.size, f32)]))
    elu_parameters = [f32(0.7 * 1.05), f32(1.05), f32(1 / 0.7)]
    cases.append((activations.elu, lambda: [x.astype(f32), *elu_parameters,
                                            np.empty(x.size, f32)]))
    cases.append((activations.elu_backward, lambda: [g.astype(f32), x.astype(f32),
                                                     *elu_parameters, np.empty(x.size, f32)]))
    cases.append((activations.softplus, lambda: [x.astype(f32), f32(1.5), f32(4),
                                                 np.empty(x.size, f32)]))
    cases.append((activations.softplus_backward, lambda: [g.astype(f32), x.astype(f32),
                                                          f32(1.5), f32(4),
                                                          np.empty(x.size, f32)]))
    cases.append((elementwise.relu, lambda: [x.astype(f32), np.empty(x.size, f32)]))
    cases.append((elementwise.relu_backward,
                  lambda: [g.astype(f32), x.astype(f32), np.empty(x.size, f32)]))
    cases.append((activations.gelu_f64, lambda: [x, np.empty(x.size)]))
    cases.append((activations.gelu_backward_f64, lambda: [g, x, np.empty(x.size)]))
    for name in ("softmax", "log_softmax"):
        cases.append((getattr(softmax, name),
                      lambda: [rows.astype(f32), False, np.empty(rows.shape, f32)]))
    cases.append((softmax.softmax_backward, lambda: [rows.astype(f32) / 9, rows.astype(f32) / 7,
                                                     np.empty(rows.shape, f32)]))
    cases.append((softmax.log_softmax_backward, lambda: [
        rows.astype(f32) / 9, rows.astype(f32) / 7, False, np.empty(rows.shape, f32)]))
    log_sum_exp = np.empty(37), np.empty(37)  # what the backward reads
    softmax.cross_entropy(rows.astype(f32), target, weight.astype(f32), -100, 0.1, False,
                          np.empty(37, f32), *log_sum_exp)
    cases.append((softmax.cross_entropy, lambda: [rows.astype(f32), target, weight.astype(f32),
                                                  -100, 0.1, False, np.empty(37, f32),
                                                  np.empty(37), np.empty(37)]))
    cases.append((softmax.cross_entropy_backward,
                  lambda: [grow.astype(f32), rows.astype(f32), target, weight.astype(f32), -100,
                           0.1, False, *log_sum_exp, np.empty(rows.shape, f32)]))
    cases.append((recurrent.lstm_step, lambda: [a.astype(f32) for a in gates[:2]]
                  + [bias[:44].astype(f32), state.astype(f32), False,
                     np.empty((23, 6 * 11), f32)]))
    cases.append((recurrent.lstm_backward_step, lambda: [
        a.astype(f32) for a in (gates[2], saved_grad, state, saved, state)]
        + [False, np.empty((23, 4 * 11), f32)]))
    cases.append((recurrent.gru_step, lambda: [a.astype(f32) for a in gru[:2]]
                  + [bias[:33].astype(f32), gru[2].astype(f32), False,
                     np.empty((23, 5 * 11), f32)]))
    cases.append((recurrent.gru_backward_step, lambda: [
        a.astype(f32) for a in (gru_saved, gru[2], gru[2] / 3, gru_saved, gru[2])]
        + [np.empty((23, 3 * 11), f32), np.empty((23, 3 * 11), f32)]))
    cases.append((indexing.add_along, lambda: [np.zeros((3, 13, 7), f32),
                                               scattered.astype(f32), positions]))
    cases.append((clip.scale, lambda: [x.astype(f32), f32(0.37)]))
    for p in (2.0, 1.0, 0.0, 3.0, np.inf, -np.inf):
        cases.append((clip.add_powers, lambda p=p: [np.abs(x[6:]) if p == -np.inf else x,
                                                    p, np.inf if p == -np.inf else 0.0]))
    cases += _recurrence_cases(recurrent, rng)
    cases += _normalization_cases(normalization, rng)
    cases += _optim_cases(optim, rng)
    cases += _attention_cases(attention, rng)
    cases.append((dropout.dropout, lambda: [x.astype(f32), np.uint32(5), np.uint32(9),
                                            np.uint32(2 ** 31), 1, f32(2), np.empty(x.size, f32)]))
    cases.append((dropout.dropout, lambda: [x[:1000].astype(f32), np.uint32(5), np.uint32(9),
                                            np.uint32(2 ** 31), 40, f32(2),
                                            np.empty(1000, f32)]))
    # Bilinear resampling of 9 planes 5 x 4 to 7 x 6, and its adjoint (overlapping adds).
    sources = [np.array([0, 0, 1, 2, 2, 3, 4]), np.array([1, 1, 2, 3, 3, 4, 4]),
               rng.random(7).astype(f32), np.array([0, 0, 1, 1, 2, 3]),
               np.array([1, 1, 2, 2, 3, 3]), rng.random(6).astype(f32)]
    planes = rng.standard_normal((9, 5, 4)).astype(f32)
    plane_grads = rng.standard_normal((9, 7, 6)).astype(f32)
    cases.append((resampling.bilinear,
                  lambda: [planes, *sources, np.empty((9, 7, 6), f32)]))
    cases.append((resampling.bilinear_adjoint,
                  lambda: [plane_grads, *sources, np.zeros((9, 5, 4), f32)]))
    cases.append((reduction.row_sums, lambda: [rows.astype(f32), 3.0, np.empty(37, f32)]))
    for name in ("row_maxima", "row_minima"):
        cases.append((getattr(reduction, name), lambda: [rows.astype(f32), np.empty(37, f32)]))
    cases.append((loss.scaled_difference, lambda: [x.astype(f32), g.astype(f32), f32(0.3),
                                                   np.empty(x.size, f32)]))
    return cases


def _recurrence_cases(recurrent, rng):
    """The LSTM's whole-loop kernels over packed steps of 5, 5, 3 and 2 sequences (11 units),
    the hidden product cut as for a few rows: in column blocks (of 15 forward, 4 backward)
    summed over pieces of the weight's rows (4 forward, 7 backward), the last of each
    shorter."""
    f32 = np.float32
    size, batch = 11, 5
    steps = np.array([(0, 5), (5, 5), (10, 3), (13, 2)], np.int64)
    rows = 15
    weight = rng.standard_normal((4 * size, size)) / 3
    xg, bias = rng.standard_normal((rows, 4 * size)), rng.standard_normal(4 * size) / 4
    state = rng.standard_normal((2, batch, size))
    saved = np.concatenate([rng.standard_normal((rows, 2 * size)),
                            rng.random((rows, 4 * size))], 1)  # [h, c, gates in (0, 1)]
    g, prev = rng.standard_normal((rows, 6 * size)), rng.standard_normal((rows, 2 * size))
    extra = rng.standard_normal((rows, 4 * size))
    forward = (recurrent.lstm_forward, lambda: [
        xg.astype(f32), bias.astype(f32), steps, False, *state.astype(f32),
        np.empty((rows, 6 * size), f32), np.empty((batch, 4 * size), f32),
        np.ascontiguousarray(weight.T, f32), 15, 4])
    backward = [(recurrent.lstm_backward, lambda added=added: [
        g.astype(f32), saved.astype(f32), prev.astype(f32), added.astype(f32), steps, False,
        np.zeros((batch, 2 * size), f32), np.empty((rows, 4 * size), f32), weight.astype(f32),
        4, 7]) for added in (extra, extra[:0])]
    return [forward] + backward


def _normalization_cases(normalization, rng):
    """LayerNorm and RMSNorm over (37, 150) rows (three column blocks of the weight-gradient
    pass, the last one short), LayerNorm over (150, 150), BatchNorm over (5, 11, 13);
    float32 only (the note above _kernels says why)."""
    rows = rng.standard_normal((37, 150)) * 3 + 1
    square = rng.standard_normal((150, 150))
    g = rng.standard_normal((37, 150))
    feature = rng.standard_normal(150)
    stats = [rng.random(37) - 0.5, rng.random(37) + 0.5]
    cube = rng.standard_normal((5, 11, 13)) * 2
    gcube = rng.standard_normal((5, 11, 13))
    channel = rng.standard_normal(11)
    channel_stats = [rng.random(11) - 0.5, rng.random(11) + 0.5]
    cases = []
    f32 = np.float32
    cases.append((normalization.layer_norm, lambda: [
        rows.astype(f32), feature.astype(f32), feature.astype(f32) / 3, 1e-5,
        np.empty(rows.shape, f32), np.empty(37), np.empty(37)]))
    # as many rows as features: threads cut x's rows, never the weight's or bias's elements
    cases.append((normalization.layer_norm, lambda: [
        square.astype(f32), feature.astype(f32), feature.astype(f32) / 3, 1e-5,
        np.empty(square.shape, f32), np.empty(150), np.empty(150)]))
    cases.append((normalization.rms_norm, lambda: [
        rows.astype(f32), feature.astype(f32), 1e-5, np.empty(rows.shape, f32), np.empty(37)]))
    # the norms' backward: 2 chunks of rows (the last one short), 5 chunks of a square
    chunks = -(-37 // normalization.CHUNK_ROWS)
    cases.append((normalization.norm_backward, lambda: [
        g.astype(f32), rows.astype(f32), feature.astype(f32), *stats,
        np.empty(rows.shape, f32), np.empty((chunks, 150), f32), np.empty((chunks, 150), f32)]))
    cases.append((normalization.norm_backward, lambda: [  # RMSNorm's: no mean, no bias
        g.astype(f32), rows.astype(f32), feature.astype(f32), np.empty(0), stats[1],
        np.empty(rows.shape, f32), np.empty((chunks, 150), f32), np.empty((chunks, 0), f32)]))
    square_chunks = -(-150 // normalization.CHUNK_ROWS)
    cases.append((normalization.norm_backward, lambda: [
        square.astype(f32), square.astype(f32).T.copy(), feature.astype(f32),
        stats[0][:1].repeat(150), stats[1][:1].repeat(150), np.empty(square.shape, f32),
        np.empty((square_chunks, 150), f32), np.empty((square_chunks, 150), f32)]))
    cases.append((normalization.batch_norm, lambda: [
        cube.astype(f32), channel.astype(f32), channel.astype(f32) / 2, 1e-5,
        np.empty(cube.shape, f32), np.empty(11), np.empty(11), np.empty(11)]))
    cases.append((normalization.batch_norm_backward, lambda: [
        gcube.astype(f32), cube.astype(f32), channel.astype(f32), *channel_stats,
        np.empty(cube.shape, f32), np.empty(11), np.empty(11)]))
    return cases


def _attention_cases(attention, rng):
    """Forward and backward on tiles of 8 (odd lengths, so the last tiles are short), two
    query heads per key head: causal with dropout and a per-element mask (whose gradient
    threads write in disjoint (batch, head) slices), and without either; float32 only (the note
    above _kernels says why). q is read strided, from a (B, L, H, E) array."""
    from mpigrad.kernels.numpy.attention import _strided
    q, g = rng.standard_normal((2, 2, 4, 19, 8)) / 3
    k = rng.standard_normal((2, 2, 23, 8))
    v = rng.standard_normal((2, 2, 23, 5))
    mask = rng.standard_normal((2, 4, 19, 23))
    mask[1, 2, 3] = -np.inf  # a row with every key masked
    dropping = (True, np.uint64(11), np.uint64(2 ** 51), 4 / 3)
    dims = (2, 4, 19, 8, 2, 23, 5)
    cases = []
    f32 = np.float32
    for masked in (True, False):
        inputs = [*_strided(q.astype(f32).transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3),
                            f32),
                  *_strided(k.astype(f32), f32), *_strided(v.astype(f32), f32), dims]
        masking = [mask.astype(f32) if masked else np.zeros((1, 1, 1, 1), f32), masked, masked]
        drop = list(dropping if masked else (False, np.uint64(0), np.uint64(0), 0.0))
        out, lse = np.empty((2, 4, 19, 5), f32), np.empty((2, 4, 19))
        attention.forward(*inputs, 0.5, *masking, *drop, 8, 8, *_strided(out, f32), lse)  # read
        cases.append((attention.forward, lambda inputs=inputs, masking=masking, drop=drop: [
            *inputs, 0.5, *masking, *drop, 8, 8, *_strided(np.empty((2, 4, 19, 5), f32), f32),
            np.empty((2, 4, 19))]))
        cases.append((attention._backward, lambda inputs=inputs, masking=masking, drop=drop,
                      out=out, lse=lse, masked=masked: [
            *inputs, *masking, 0.5, *drop, 8, 8, *_strided(out, f32), lse,
            *_strided(g[..., :5].astype(f32), f32),
            np.zeros(mask.shape if masked else (0, 0, 0, 0)),
            *[np.zeros(a.shape, f32) for a in (q, k, v)]]))
    cases.append((attention.dropout_scale, lambda: [np.uint64(11), np.uint64(2 ** 52), 2.0,
                                                    np.empty((2, 3, 5, 7))]))
    return cases


def test_a_broadcast_mask_gradient_is_summed_on_one_thread(monkeypatch, restore_threads):
    """Threads own (batch, key head) pairs; a mask gradient of shape (1, 1, L, S) is added to
    by all of them, so the backward runs its serial twin; it equals the per-pair gradients
    (threaded) summed."""
    from mpigrad.kernels.compiled import _threads, attention
    if _threads._POOL < 2:
        pytest.skip("numba has one thread here")
    rng = np.random.default_rng(5)
    # float32, as the bit-for-bit test's cases, whose compiled loops this reuses; the mask's
    # gradient is float64 whatever the dtype, so the sums still agree to float64 rounding
    from mpigrad.kernels.numpy.attention import _strided
    q, g = rng.standard_normal((2, 2, 3, 9, 4)).astype(np.float32)
    k, v = rng.standard_normal((2, 2, 3, 11, 4)).astype(np.float32)
    mask = rng.standard_normal((1, 1, 9, 11)).astype(np.float32)
    inputs = [*_strided(q, np.float32), *_strided(k, np.float32), *_strided(v, np.float32),
              (2, 3, 9, 4, 3, 11, 4)]
    out, lse = np.empty(q.shape, np.float32), np.empty(q.shape[:3])
    attention.forward(*inputs, 1.0, mask, True, False, False, np.uint64(0), np.uint64(0), 0.0,
                      4, 4, *_strided(out, np.float32), lse)

    def backward(mask_shape):
        mask_grad = np.zeros(mask_shape)
        attention.backward(*inputs, np.broadcast_to(mask, mask_shape).copy(), True, False,
                           1.0, False, np.uint64(0), np.uint64(0), 0.0, 4, 4,
                           *_strided(out, np.float32), lse,
                           *_strided(g, np.float32), mask_grad,
                           *[np.zeros_like(a) for a in (q, k, v)])
        return mask_grad

    mg.set_num_threads(2)
    monkeypatch.setattr(attention._backward, "grain", 7)
    per_pair = backward((2, 3, 9, 11))

    def refuse(*args):
        raise AssertionError("the threaded twin ran")
    monkeypatch.setattr(attention._backward, "_threaded", refuse)
    with pytest.raises(AssertionError, match="threaded twin ran"):  # the spy is live
        backward((2, 3, 9, 11))
    shared = backward((1, 1, 9, 11))
    np.testing.assert_allclose(shared[0, 0], per_pair.sum((0, 1)), rtol=1e-12, atol=1e-12)


def _optim_cases(optim, rng):
    """Every update on 1001 float32 elements with every option that changes its loop on."""
    state = [rng.standard_normal(1001) for _ in range(4)]
    squares = [rng.random(1001) for _ in range(3)]
    f32 = np.float32

    def arrays(*which):
        return [a.astype(f32) for a in which]

    none = np.empty(0, f32)
    p, g, m, b = state
    v, u, w = squares
    cases = []
    for nesterov, first in ((True, False), (False, True)):
        cases.append((optim.sgd, lambda nesterov=nesterov, first=first: arrays(p, g, b) + [
            f32(0.1), f32(0.9), f32(0.8), f32(0.01), nesterov, True, first]))
    cases.append((optim.sgd, lambda: arrays(p, g) + [none, f32(0.1), f32(0), f32(1), f32(0),
                                                     False, False, False]))
    for amsgrad in (True, False):
        cases.append((optim.adam, lambda amsgrad=amsgrad: arrays(p, g, m, v)
                      + (arrays(u) if amsgrad else [none]) + [
                          f32(1e-3), f32(0.3), f32(0.1), f32(0.9), f32(0.999), f32(0.001),
                          f32(1e-8), f32(0.99), f32(0.01), True]))
    cases.append((optim.adagrad, lambda: arrays(p, g, v) + [f32(0.1), f32(0.01), f32(1e-10),
                                                           False]))
    cases.append((optim.adadelta, lambda: arrays(p, g, v, u) + [
        f32(1), f32(0.9), f32(0.1), f32(1e-6), f32(0.01), True]))
    for centered in (True, False):
        cases.append((optim.rmsprop, lambda centered=centered: arrays(p, g, v)
                      + (arrays(m / 9) if centered else [none]) + arrays(b) + [
                          f32(0.01), f32(0.99), f32(0.01), f32(1e-8), f32(0.01), f32(0.9),
                          False]))
    cases.append((optim.adamax, lambda: arrays(p, g, m, u) + [
        f32(0.002), f32(0.1), f32(0.9), f32(0.999), f32(1e-8), f32(0.01), False]))
    cases.append((optim.nadam, lambda: arrays(p, g, m, v) + [
        f32(-1e-3), f32(-2e-3), f32(0.3), f32(0.1), f32(0.9), f32(0.999), f32(0.001),
        f32(1e-8), f32(1), f32(0.01), False]))
    for rectified in (True, False):
        cases.append((optim.radam, lambda rectified=rectified: arrays(p, g, m, v) + [
            f32(1e-3), f32(0.5), f32(0.4), f32(0.7), rectified, f32(0.1), f32(0.9),
            f32(0.999), f32(0.001), f32(1e-8), f32(0.99), f32(0.01), False]))
    return cases


def test_threaded_loops_equal_the_serial_ones_bit_for_bit(monkeypatch, restore_threads):
    from mpigrad.kernels.compiled import _threads
    outputs = {}
    for kernel, arguments in _kernels():
        monkeypatch.setattr(kernel, "grain", 7)  # so that these small, odd sizes are split
        results = []
        for n in (1, 2, 3, 2):
            mg.set_num_threads(n)
            args = arguments()
            assert kernel.threads_for(args) == min(n, _threads._POOL)
            returned = kernel(*args)
            results.append([a.copy() for a in args if isinstance(a, np.ndarray)]
                           + [np.asarray(returned)])
        for threaded in results[1:]:
            for serial, other in zip(results[0], threaded):
                np.testing.assert_array_equal(serial, other, err_msg=kernel.function.__name__)
        outputs[kernel.function.__name__] = results[0]
    assert _threads.numba.threading_layer() == (
        "omp" if _threads._shares_onednn_team()
        else "tbb" if _threads._load_tbb() else "workqueue")
    # the partitioned scatter-add agrees with np.add.at
    out, g, positions = outputs["add_along"][:3]
    expected = np.zeros((3, 13, 7), np.float32)
    np.add.at(expected, (slice(None), positions), g)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_small_work_stays_on_one_thread(restore_threads):
    from mpigrad.kernels.compiled import activations
    mg.set_num_threads(2)
    small = np.ones(activations.silu_f32.grain, np.float32)
    assert activations.silu_f32.threads_for([small, small]) == 1
    large = np.ones(4 * activations.silu_f32.grain, np.float32)
    assert activations.silu_f32.threads_for([large, large]) == min(2, os.cpu_count())


def test_an_f_ordered_matrix_runs_on_one_thread(restore_threads):
    """Threads cut a rows= loop's arrays into row ranges, which an F-ordered matrix's are
    not: its loop runs serially (the ops pass C-ordered arrays; this is the guard)."""
    from mpigrad.kernels.compiled import _threads, softmax
    if _threads._POOL < 2:
        pytest.skip("numba has one thread here")
    mg.set_num_threads(2)
    rows = np.asfortranarray(np.random.default_rng(3).standard_normal((3000, 31)))
    out, expected = np.empty_like(rows), np.empty_like(rows)
    softmax.softmax.serial(rows, True, expected)
    softmax.softmax(rows, True, out)
    np.testing.assert_array_equal(out, expected)
    assert 0 in softmax.softmax._addresses.values()


# --- the guards ---------------------------------------------------------------------------

GUARDS = """
import json, sys, threading
import numpy as np
import mpigrad as mg
from mpigrad import data
from mpigrad.kernels.compiled import activations
F = mg.nn.functional
mg.set_num_threads(2)
activations.gelu_f32.grain = activations.silu_f32.grain = 64
x = np.linspace(-4, 4, 5000, dtype=np.float32)
expected = F.gelu(mg.tensor(x)).numpy()

# several Python threads entering threaded loops at once: one runs threaded, the others serial
failures = []
def work():
    for _ in range(200):
        if not np.array_equal(F.gelu(mg.tensor(x)).numpy(), expected):
            failures.append(1)
pool = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in pool]
[t.join() for t in pool]

# DataLoader workers forked after threaded loops ran, running threaded loops themselves
class Activated(data.Dataset):
    def __len__(self):
        return 6
    def __getitem__(self, i):
        return F.silu(mg.tensor(x + i))
loader = data.DataLoader(Activated(), batch_size=2, num_workers=2)
batches = [b.numpy() for b in loader]
# and forked from a thread other than the main one, whose pool a child may not inherit
other = []
loading = threading.Thread(target=lambda: other.extend(b.numpy() for b in loader))
loading.start()
loading.join()
same = all(np.array_equal(b[j], F.silu(mg.tensor(x + (2 * k + j))).numpy())
           for k, b in enumerate(batches) for j in range(2))
same = same and all(np.array_equal(a, b) for a, b in zip(batches, other))
print(json.dumps([len(failures), len(batches + other) // 2, same]))
"""


def test_concurrent_threaded_loops_and_forked_workers_neither_crash_nor_differ():
    assert _run(GUARDS) == [0, 3, True]


def test_on_the_workqueue_layer_too():
    # where no tbb wheel exists (ARM): workqueue, its calls threaded from more work
    assert _run(GUARDS + WORKQUEUE_WORK, NUMBA_THREADING_LAYER="workqueue") == [
        "workqueue", 1, 2]


WORKQUEUE_WORK = """
from mpigrad.kernels.compiled import _threads
grain = activations.silu_f32.grain * _threads.WORKQUEUE_GRAINS
print(json.dumps([_threads.numba.threading_layer()] + [
    activations.silu_f32.threads_for([np.ones(n * grain, np.float32)]) for n in (1, 2)]))
"""


LAYER = """
import json
import numpy as np
import mpigrad as mg
from mpigrad.kernels import onednn
from mpigrad.kernels.compiled import _threads, activations
mg.set_num_threads(2)
activations.silu_f32(*[np.ones(4 * activations.silu_f32.grain, np.float32)] * 2)
print(json.dumps([_threads.numba.threading_layer(), onednn.library() is not None,
                  _threads._load_tbb()]))
"""


def test_the_loops_share_onednn_s_openmp_team_where_it_is_loaded():
    layer, loaded, tbb = _run(LAYER)
    assert layer == ("omp" if loaded else "tbb" if tbb else "workqueue")
    # without oneDNN there is no team to share, and tbb's regions cost least
    layer, loaded, tbb = _run(LAYER, MPIGRAD_ONEDNN="0")
    assert not loaded and layer == ("tbb" if tbb else "workqueue")


OMP_WORK = """
import json, threading
import numpy as np
import mpigrad as mg
from mpigrad.kernels.compiled import activations
mg.set_num_threads(2)
large = [np.ones(4 * activations.silu_f32.grain, np.float32)]
on_thread = []
helper = threading.Thread(target=lambda: on_thread.append(activations.silu_f32.threads_for(large)))
helper.start()
helper.join()
print(json.dumps([activations.silu_f32.threads_for(large)] + on_thread))
"""


def test_with_gnu_openmp_a_forked_worker_runs_serially():
    # numba's omp layer loads the system's libgomp: skipped where there is none
    pytest.importorskip("numba.np.ufunc.omppool")
    # GNU OpenMP kills a child that enters it after its parent did; the guard runs serially
    assert _run(GUARDS, NUMBA_THREADING_LAYER="omp") == [0, 3, True]
    # and only the main thread opens regions: a team whose thread ended could leave a lock
    # held in a child forked at that moment (_threads._may_start_a_team)
    assert _run(OMP_WORK, NUMBA_THREADING_LAYER="omp") == [min(2, os.cpu_count()), 1]
