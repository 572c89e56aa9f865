"""oneDNN, the library torch's convolutions and RNNs run on, from its wheel: is it the way to
torch's convolution times? Each convolution layer of bench_models' ResNet and tutorial CNN
(forward, input gradient, weight gradient) in mpigrad's kernels, in oneDNN through its C API
(ctypes) and in torch; then oneDNN's sgemm against numpy's BLAS on the GPT's, the MLP's and
the word LM's products. One thread, thread CPU time, the median of the rounds
(docs/benchmarks.md, "oneDNN from its wheel").

    pip install onednn-cpu-gomp==2023.2.0   # oneDNN 3.2 on GNU OpenMP (the system's libgomp)
    python jobs/bench/bench_onednn.py [--library PATH] [--rounds 11]

oneDNN is asked to pick its own layouts (blocked, for its direct convolutions): each timed
call includes the reorders from and to mpigrad's NCHW / OIHW arrays, as a call from the op
layer would. Held to the plain layouts, it takes im2col and a GEMM ("gemm:jit") and loses to
mpigrad's kernels. The names of the implementations it chose are printed.
"""
import harness  # noqa: F401  (first: one thread per process)

import argparse  # noqa: E402
import ctypes  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

from mpigrad.kernels.numpy import conv as kernels  # noqa: E402

# (batch, channels, image size, output channels, stride, kernel, padding)
LAYERS = {"ResNet 16 ch 32x32": (32, 16, 32, 16, 1, 3, 1),
          "ResNet 32 ch 16x16": (32, 32, 16, 32, 1, 3, 1),
          "ResNet 16->32 stride 2": (32, 16, 32, 32, 2, 3, 1),
          "ResNet stem": (32, 3, 32, 16, 1, 3, 1),
          "CNN conv1": (64, 1, 28, 10, 1, 5, 0),
          "CNN conv2": (64, 10, 12, 20, 1, 5, 0)}
# (M, K, N): the GPT's layers forward and backward, the MLP's, the word LM's decoder and input
# projection, and the LSTM's step products.
PRODUCTS = [(1024, 128, 384), (1024, 128, 128), (1024, 128, 512), (1024, 512, 128),
            (384, 1024, 128), (128, 1024, 512), (64, 784, 1024), (64, 1024, 1024),
            (700, 200, 1000), (700, 200, 800), (20, 200, 800), (20, 800, 200)]

# dnnl_types.h / dnnl_common_types.h of oneDNN 3.2
F32, PLAIN_4D, ANY_LAYOUT = 3, 5, 1
CPU_ENGINE, IN_ORDER = 1, 1
FORWARD_TRAINING, CONVOLUTION_DIRECT = 64, 1
ARG_SRC, ARG_DST, ARG_WEIGHTS = 1, 17, 33
ARG_DIFF_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS = 129, 145, 161
QUERY_IMPLEMENTATION = 8
QUERY = {ARG_SRC: 129, ARG_DIFF_SRC: 130, ARG_WEIGHTS: 131, ARG_DIFF_WEIGHTS: 132,
         ARG_DST: 133, ARG_DIFF_DST: 134}
ALLOCATE = ctypes.c_void_p(2 ** 64 - 1)  # DNNL_MEMORY_ALLOCATE
Pointer, Dims = ctypes.c_void_p, ctypes.c_int64 * 12


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", Pointer)]


class OneDNN:
    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.dnnl_primitive_desc_query_md.restype = Pointer
        self.lib.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char] + [ctypes.c_int64] * 3 + [
            ctypes.c_float, Pointer, ctypes.c_int64, Pointer, ctypes.c_int64, ctypes.c_float,
            Pointer, ctypes.c_int64]
        self.engine, self.stream = Pointer(), Pointer()
        self.call("dnnl_engine_create", ctypes.byref(self.engine), CPU_ENGINE, 0)
        self.call("dnnl_stream_create", ctypes.byref(self.stream), self.engine, IN_ORDER)

    def call(self, name, *args):
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise RuntimeError(f"{name} returned dnnl_status {status}")

    def desc(self, shape, layout):
        made = Pointer()
        self.call("dnnl_memory_desc_create_with_tag", ctypes.byref(made), len(shape),
                  Dims(*shape), F32, layout)
        return made

    def memory(self, desc, array=None):
        made = Pointer()
        self.call("dnnl_memory_create", ctypes.byref(made), desc, self.engine,
                  ALLOCATE if array is None else Pointer(array.ctypes.data))
        return made

    def primitive(self, primitive_desc):
        made = Pointer()
        self.call("dnnl_primitive_create", ctypes.byref(made), primitive_desc)
        return made

    def execute(self, primitive, args):
        packed = (ExecArg * len(args))(*[ExecArg(arg, memory) for arg, memory in args.items()])
        self.call("dnnl_primitive_execute", primitive, self.stream, len(args), packed)

    def implementation(self, primitive_desc):
        name = ctypes.c_char_p()
        self.call("dnnl_primitive_desc_query", primitive_desc, QUERY_IMPLEMENTATION, 0,
                  ctypes.byref(name))
        return name.value.decode()

    def reorder(self, source, target):
        made = Pointer()
        self.call("dnnl_reorder_primitive_desc_create", ctypes.byref(made), source,
                  self.engine, target, self.engine, None)
        return self.primitive(made)

    def step(self, primitive_desc, inputs, output):
        """A call of the primitive on plain arrays: {arg: (plain desc, array)} in, (arg, plain
        desc, array) out, each reordered to and from the layout the primitive chose."""
        run, chosen, layouts = self.primitive(primitive_desc), {}, {}
        out_arg, out_plain, out_array = output
        for arg in (*inputs, out_arg):
            layouts[arg] = Pointer(self.lib.dnnl_primitive_desc_query_md(primitive_desc,
                                                                         QUERY[arg], 0))
            chosen[arg] = self.memory(layouts[arg])
        reorders = [(self.reorder(plain, layouts[arg]), self.memory(plain, array), chosen[arg])
                    for arg, (plain, array) in inputs.items()]
        reorder_out = (self.reorder(layouts[out_arg], out_plain), chosen[out_arg],
                       self.memory(out_plain, out_array))

        def call():
            for reorder, source, target in reorders:
                self.execute(reorder, {ARG_SRC: source, ARG_DST: target})
            self.execute(run, chosen)
            reorder, source, target = reorder_out
            self.execute(reorder, {ARG_SRC: source, ARG_DST: target})
            self.call("dnnl_stream_wait", self.stream)
        return call

    def convolution(self, x, w, g, stride, padding):
        """(forward, input gradient, weight gradient) as calls writing (y, dx, dw), and the
        implementations oneDNN chose for them."""
        plain = [self.desc(a.shape, PLAIN_4D) for a in (x, w, g)]
        any_layout = [self.desc(a.shape, ANY_LAYOUT) for a in (x, w, g)]
        geometry = Dims(stride, stride), Dims(0, 0), Dims(padding, padding), Dims(padding, padding)
        forward, data, weights = Pointer(), Pointer(), Pointer()
        self.call("dnnl_convolution_forward_primitive_desc_create", ctypes.byref(forward),
                  self.engine, FORWARD_TRAINING, CONVOLUTION_DIRECT, any_layout[0], any_layout[1],
                  None, any_layout[2], *geometry, None)
        self.call("dnnl_convolution_backward_data_primitive_desc_create", ctypes.byref(data),
                  self.engine, CONVOLUTION_DIRECT, any_layout[0], any_layout[1], any_layout[2],
                  *geometry, forward, None)
        self.call("dnnl_convolution_backward_weights_primitive_desc_create",
                  ctypes.byref(weights), self.engine, CONVOLUTION_DIRECT, any_layout[0],
                  any_layout[1], None, any_layout[2], *geometry, forward, None)
        outputs = [np.empty(a.shape, np.float32) for a in (g, x, w)]
        calls = (self.step(forward, {ARG_SRC: (plain[0], x), ARG_WEIGHTS: (plain[1], w)},
                           (ARG_DST, plain[2], outputs[0])),
                 self.step(data, {ARG_DIFF_DST: (plain[2], g), ARG_WEIGHTS: (plain[1], w)},
                           (ARG_DIFF_SRC, plain[0], outputs[1])),
                 self.step(weights, {ARG_SRC: (plain[0], x), ARG_DIFF_DST: (plain[2], g)},
                           (ARG_DIFF_WEIGHTS, plain[1], outputs[2])))
        return calls, outputs, [self.implementation(d) for d in (forward, data, weights)]

    def sgemm(self, a, b, out):
        m, n = out.shape
        self.call("dnnl_sgemm", b"N", b"N", m, n, a.shape[1], 1.0, a.ctypes.data, a.shape[1],
                  b.ctypes.data, n, 0.0, out.ctypes.data, n)


def median_ms(run, rounds, repeats=1):
    run()
    return 1e3 * statistics.median(harness.time_call(run, repeats) for _ in range(rounds))


def find_library():
    for lib in (pathlib.Path(sys.prefix) / "lib", pathlib.Path(sys.base_prefix) / "lib"):
        if (lib / "libdnnl.so.3").exists():
            return lib / "libdnnl.so.3"
    sys.exit("libdnnl.so.3 not found under the environment's lib/: pip install "
             "onednn-cpu-gomp==2023.2.0, or give --library")


def compare_convolutions(dnnl, torch, rounds):
    rng = np.random.default_rng(0)
    print("convolution layers, ms: mpigrad / oneDNN / torch (oneDNN's implementations)")
    for name, (n, c, size, o, stride, k, padding) in LAYERS.items():
        x = rng.standard_normal((n, c, size, size), dtype=np.float32)
        w = rng.standard_normal((o, c, k, k), dtype=np.float32) / np.float32(k * np.sqrt(c))
        out = (size + 2 * padding - k) // stride + 1
        g = rng.standard_normal((n, o, out, out), dtype=np.float32)
        calls, outputs, implementations = dnnl.convolution(x, w, g, stride, padding)
        geometry = (stride, stride), (padding, padding), (1, 1)
        ours = (lambda: kernels.conv2d(x, w, None, *geometry),
                lambda: kernels.conv_transpose2d(g, w, (size, size), *geometry),
                lambda: kernels.conv2d_weight(x, g, (k, k), *geometry))
        tx, tw, tg = map(torch.from_numpy, (x, w, g))

        def torch_gradient(which):
            return lambda: torch.ops.aten.convolution_backward(
                tg, tx, tw, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1, which)
        theirs = (lambda: torch.nn.functional.conv2d(tx, tw, None, stride, padding),
                  torch_gradient([True, False, False]), torch_gradient([False, True, False]))
        row = []
        for what, mine, call, output, torch_call in zip(("forward", "input grad", "weight grad"),
                                                        ours, calls, outputs, theirs):
            call()
            np.testing.assert_allclose(output, mine(), rtol=1e-3, atol=1e-3, err_msg=what)
            row.append(f"{what} {median_ms(mine, rounds):5.2f} / {median_ms(call, rounds):5.2f}"
                       f" / {median_ms(torch_call, rounds):5.2f}")
        print(f"  {name:24s}", " | ".join(row), f"({', '.join(sorted(set(implementations)))})")


def compare_products(dnnl, torch, rounds):
    rng = np.random.default_rng(1)
    print("products (M, K, N), us: numpy's BLAS / oneDNN's sgemm / torch")
    totals = np.zeros(3)
    for m, k, n in PRODUCTS:
        a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
        out, theirs = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.empty(m, n)
        dnnl.sgemm(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4)
        repeats = max(1, int(1e8 // (m * n * k)))
        times = np.array([median_ms(run, rounds, repeats) for run in (
            lambda: np.matmul(a, b, out=theirs), lambda: dnnl.sgemm(a, b, out),
            lambda: torch.mm(ta, tb, out=tout))]) * 1e3
        totals += times
        print(f"  {str((m, k, n)):18s}", " / ".join(f"{t:7.0f}" for t in times))
    print(f"  {'total':18s}", " / ".join(f"{t:7.0f}" for t in totals))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", type=pathlib.Path, help="libdnnl.so.3 to load")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    import torch
    torch.set_num_threads(1)
    dnnl = OneDNN(args.library or find_library())
    compare_convolutions(dnnl, torch, args.rounds)
    compare_products(dnnl, torch, args.rounds)


if __name__ == "__main__":
    main()
