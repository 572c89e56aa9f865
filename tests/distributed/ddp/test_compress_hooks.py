"""fp16_compress_hook and bf16_compress_hook: the 16-bit encodings against torch's
conversions, and the hooks' gradients against their ring computed from every rank's gradient
in one process (bit for bit), and against the exact sum (within the encoding's precision)."""
import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
from mpigrad.distributed.algorithms.ddp_comm_hooks import compression
from mpigrad.distributed.algorithms.ddp_comm_hooks.default_hooks import (bf16_compress_hook,
                                                                         fp16_compress_hook)
from mpigrad.nn.parallel import DistributedDataParallel as DDP

from ._models import MLP, mse, regression_data

CODECS = {"fp16": (fp16_compress_hook, compression.FLOAT16),
          "bf16": (bf16_compress_hook, compression.BFLOAT16)}


def gradient_sample(n=10_000, seed=0):
    """Gradient-like float32 values: mostly around 1e-5 (float16 subnormals), some large, a
    few exact zeros and ties for the rounding."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 0, n)).astype(np.float32)
    x[:5] = 0
    x[5:10] = np.float32(1 + 2 ** -8)  # halfway between two bfloat16 numbers: rounds to even
    return x


def round_trip(codec, x):
    message = np.empty(codec.header + x.size, np.uint16)
    codec.encode(x, message)
    out = np.empty(x.size, np.float32)
    codec.decode(message, out)
    return out


def test_bf16_rounds_as_torch():
    torch = pytest.importorskip("torch")
    x = np.concatenate([gradient_sample(), np.array([np.inf, -np.inf, 3.4e38], np.float32)])
    want = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(round_trip(compression.BFLOAT16, x), want)
    assert np.isnan(round_trip(compression.BFLOAT16, np.array([np.nan], np.float32))).all()


def test_fp16_scales_into_the_normal_range():
    torch = pytest.importorskip("torch")
    x = gradient_sample()
    k = 15 - np.frexp(np.abs(x).max())[1]
    scaled = torch.from_numpy(x * np.float32(2.0 ** k)).half().float().numpy()
    assert np.array_equal(round_trip(compression.FLOAT16, x), scaled / np.float32(2.0 ** k))
    # Relative precision of float16's 11 bits for every value within 2^14 of the largest.
    big = np.abs(x) >= np.abs(x).max() * 2.0 ** -14
    np.testing.assert_allclose(round_trip(compression.FLOAT16, x)[big], x[big], rtol=2 ** -11)
    assert np.array_equal(round_trip(compression.FLOAT16, np.zeros(3, np.float32)), np.zeros(3))


def local_gradients(rank, size):
    """Every rank's own gradients (no DDP), each divided by the world size as DDP's buckets
    hold them."""
    model = MLP(seed=0, dtype=np.float32)
    x, y = regression_data(4, seed=rank, dtype=np.float32)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    return [p.grad._array / np.float32(size) for p in model.parameters()]


def ddp_gradients(rank, hook):
    model = DDP(MLP(seed=0, dtype=np.float32), bucket_cap_mb=0)
    model.register_comm_hook(None, hook)
    x, y = regression_data(4, seed=rank, dtype=np.float32)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()
    return [p.grad._array.copy() for p in model.parameters()]


def ring_oracle(codec, arrays):
    """What the ring computes from every rank's flat float32 array, in one process: chunk c
    starts as rank c's, and each next rank adds its own to the decoded message; the owner's
    sum goes round once more encoded."""
    size = len(arrays)
    total = np.empty_like(arrays[0])
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(total.size), size)])
    for c in range(size):
        lo, hi = bounds[c], bounds[c + 1]
        acc = arrays[c][lo:hi].copy()
        for j in range(1, size):
            acc = arrays[(c + j) % size][lo:hi] + round_trip(codec, acc)
        total[lo:hi] = round_trip(codec, acc)
    return total


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", sorted(CODECS))
def test_hook_is_the_ring_of_encoded_chunks_summed_in_float32(rank, size, name):
    hook, codec = CODECS[name]
    everyone = [local_gradients(r, size) for r in range(size)]
    got = ddp_gradients(rank, hook)
    for i, g in enumerate(got):
        want = ring_oracle(codec, [everyone[r][i].ravel() for r in range(size)])
        assert np.array_equal(g.ravel(), want), f"parameter {i}"
        # And within the encoding's precision of the exact sum: at most N roundings of
        # partial sums no larger than the sum of magnitudes.
        exact = sum(np.float64(everyone[r][i]) for r in range(size))
        magnitude = sum(np.abs(np.float64(everyone[r][i])) for r in range(size))
        unit = {"fp16": 2 ** -11, "bf16": 2 ** -8}[name]
        assert np.all(np.abs(g - exact) <= size * unit * magnitude.max())
    flat = np.concatenate([g.ravel() for g in got])
    assert all(np.array_equal(f, flat) for f in MPI.COMM_WORLD.allgather(flat))
