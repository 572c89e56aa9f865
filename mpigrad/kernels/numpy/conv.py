"""The numpy kernels of the sliding-window ops (ops/conv.py): im2col and col2im,
convolution, max pooling.

Everything here reads and writes images through one strided view, `windows`: for padded
images (N, C, Hp, Wp) it is (N, C, kh, kw, oh, ow), tap (i, j) of the window at (r, s), with
no copy.

- `unfold` (im2col) and `fold` (col2im, one compiled loop: compiled/conv.py);
- `conv2d`, `conv_transpose2d` (its gradient for the input) and `conv2d_weight` (for the
  weight): im2col and one GEMM per chunk of samples, the chunk sized so that its columns are
  still in cache when the GEMM (or col2im) reads them; a 1x1 convolution needs no columns;
  a stride-1 convolution with enough channels copies one kernel row's columns and takes a
  GEMM per kernel row over shifted views of them (`_row_columns`);
  3x3 stride-1 convolutions with many channels take Winograd's F(2x2, 3x3) instead (its
  transforms compiled loops, compiled/conv.py); with
  groups, one batched GEMM over the groups per sample (depthwise convolutions included).
  Without groups the chunks run on `set_num_threads` threads (threads.run_chunks), each in
  work arrays of its thread's own; chunk boundaries follow from the sizes only, and the
  weight's gradient adds the chunks' sums in chunk order, so any thread count gives the
  same bits;
- `max_pool2d` with `tap_scatter` and `tap_gather`: one compiled pass finds each window's
  maximum and its winning tap (the first maximum, as torch), which the forward keeps for
  the fused backward to send the gradient there (another compiled pass); by chunks of
  samples on the threads too.

Sizes are (height, width) pairs.
"""
import collections
import math
import threading

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..onednn import conv as onednn
from ..threads import get_num_threads, run_chunks
from ._compiled import COMPILED_FROM, compute_dtype, loops, result

# Columns of one chunk of samples (rows C * kh * kw, columns oh * ow) are at most this big,
# so im2col writes them to cache and the GEMM reads them from there; measured best at 1-4 MB.
_CHUNK_BYTES = 2 << 20

_scratch = threading.local()
_SCRATCH_ARRAYS = 64


def _scratch_array(shape, dtype, key, zeros=False):
    """A work array that the next call with the same key gets again (per thread), never
    handed out of this module. Training repeats shapes, and faulting in the fresh pages of a
    new megabyte-sized array each step costs more than the copy that fills it. `key` names
    what the caller relies on, e.g. which cells stay zero because it never writes them."""
    arrays = getattr(_scratch, "arrays", None)
    if arrays is None:
        arrays = _scratch.arrays = collections.OrderedDict()
    full_key = (key, tuple(shape), np.dtype(dtype))
    array = arrays.get(full_key)
    if array is None:
        array = arrays[full_key] = (np.zeros if zeros else np.empty)(shape, dtype)
        if len(arrays) > _SCRATCH_ARRAYS:
            arrays.popitem(last=False)
    else:
        arrays.move_to_end(full_key)
    return array


def sliding_output_size(size, kernel_size, dilation, padding, stride):
    """Output positions along each spatial axis; positive when the kernel fits."""
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                 for n, k, d, p, s in zip(size, kernel_size, dilation, padding, stride))


def _strided(array, shape, strides):
    """as_strided's view of `array`, made through np.ndarray where `array` is contiguous:
    as_strided builds a Python array interface per call, 10x the time (about 15 us against
    1.5), and a training step makes hundreds of these views."""
    if array.flags.c_contiguous:
        return np.ndarray(shape, array.dtype, array, 0, strides)
    return as_strided(array, shape, strides)


def windows(padded, kernel_size, dilation, stride, out_size):
    """The (N, C, kh, kw, oh, ow) view of every window of `padded` (N, C, H, W); writable, so
    col2im can add into it tap by tap."""
    (kh, kw), (dh, dw), (sh, sw), (oh, ow) = kernel_size, dilation, stride, out_size
    n, c, row, col = padded.strides
    return _strided(padded, padded.shape[:2] + (kh, kw, oh, ow),
                    (n, c, dh * row, dw * col, sh * row, sw * col))


def _pad(x, padding, value=0, extra=(0, 0)):
    """x with `padding` on every side and `extra` more at the bottom and right (ceil_mode)."""
    (ph, pw), (eh, ew) = padding, extra
    if not (ph or pw or eh or ew):
        return x
    n, c, h, w = x.shape
    out = np.full((n, c, h + 2 * ph + eh, w + 2 * pw + ew), value, x.dtype)
    out[:, :, ph:ph + h, pw:pw + w] = x
    return out


def _crop(padded, padding, size):
    (ph, pw), (h, w) = padding, size
    if padded.shape[2:] == (h, w):
        return padded
    return np.ascontiguousarray(padded[:, :, ph:ph + h, pw:pw + w])


# ----------------------------------------------------------------------------- im2col, col2im
def _im2col_into(cols, taps):
    """Copy each tap's view (N, C, kh, kw, ...) into columns (N, C * kh * kw, ...)."""
    np.copyto(cols.reshape(taps.shape), taps)


def _fold_into(image, cols, kernel_size, dilation, stride, out_size, pitch):
    """Add columns (N, C * kh * kw, length; window (r, s) at column r * pitch + s) onto
    contiguous padded images (N, C, H, W) at their taps; overlapping windows accumulate. One
    compiled loop (compiled/conv.py), in float32 for float16 images. With pitch the image's
    width and stride 1 (the flat layout), each tap's columns are one run of the image."""
    width = image.shape[3]
    (dh, dw), (sh, sw), (oh, ow) = dilation, stride, out_size
    if pitch == width and (sh, sw) == (1, 1):
        oh, ow = 1, cols.shape[2]
    work = compute_dtype(image.dtype)
    target = image if image.dtype == work else image.astype(work)
    loops("conv").fold_add(np.ascontiguousarray(cols, work),
                           target.reshape(image.shape[0], image.shape[1], -1), kernel_size[1],
                           (dh * width, dw), (sh * width, sw), oh, ow, pitch)
    if target is not image:
        image[...] = target


def unfold(x, kernel_size, dilation, padding, stride):
    n, c = x.shape[:2]
    out_size = sliding_output_size(x.shape[2:], kernel_size, dilation, padding, stride)
    # Always a copy, even where a view would do (1x1): the result must not alias x.
    cols = np.empty((n, c * kernel_size[0] * kernel_size[1], out_size[0] * out_size[1]),
                    x.dtype)
    _im2col_into(cols, windows(_pad(x, padding), kernel_size, dilation, stride, out_size))
    return cols


def fold(cols, output_size, kernel_size, dilation, padding, stride):
    (ph, pw), (h, w) = padding, output_size
    n = cols.shape[0]
    c = cols.shape[1] // (kernel_size[0] * kernel_size[1])
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), cols.dtype)
    out_size = sliding_output_size(output_size, kernel_size, dilation, padding, stride)
    _fold_into(out, cols, kernel_size, dilation, stride, out_size, out_size[1])
    return _crop(out, padding, output_size)


# ----------------------------------------------------------------------------- convolution
class _Columns:
    """Where a convolution's columns live: column q = r * pitch + s is the window at (r, s).

    With stride 1 the pitch is the padded width, so one tap's columns of one channel are a
    single contiguous run of the padded image: im2col and col2im move a few long runs instead
    of many rows of ow. The columns with s >= ow then are junk: computed and dropped in the
    output, zero in gradients (so they add nothing). Otherwise the pitch is ow and every
    column is a window.
    """

    def __init__(self, in_size, kernel_size, dilation, padding, stride):
        self.kernel_size, self.dilation, self.padding, self.stride = (
            tuple(kernel_size), dilation, padding, stride)
        self.in_size = tuple(in_size)
        self.padded_size = tuple(s + 2 * p for s, p in zip(in_size, padding))
        self.out_size = sliding_output_size(in_size, kernel_size, dilation, padding, stride)
        oh, ow = self.out_size
        self.flat = stride == (1, 1)
        self.pitch = self.padded_size[1] if self.flat else ow
        self.length = (oh - 1) * self.pitch + ow
        self.pointwise = self.kernel_size == (1, 1) and padding == (0, 0) and self.flat
        # Flat: kernel row i's columns are row 0's shifted by i dh rows of the image.
        self.row_shift = dilation[0] * self.pitch
        self.span = self.length + (self.kernel_size[0] - 1) * self.row_shift

    def by_kernel_rows(self, channels):
        """Whether to copy only one kernel row's taps (see _row_columns): flat, a kernel of
        several rows, and enough channels that each row's GEMM still has a long K."""
        return (self.flat and self.kernel_size[0] > 1
                and channels * self.kernel_size[1] >= _ROW_GEMM_FROM)

    def row_taps(self, padded):
        """The flat layout's (N, C, kw, span) view of padded images with contiguous rows:
        tap j of kernel row 0 at column q, continued over the rows below."""
        (n, c, _, col), dw = padded.strides, self.dilation[1]
        return _strided(padded, padded.shape[:2] + (self.kernel_size[1], self.span),
                        (n, c, dw * col, col))

    def fold_into(self, images, cols):
        """Add columns (N, C * kh * kw, length) onto contiguous padded images at their
        taps."""
        _fold_into(images, cols, self.kernel_size, self.dilation, self.stride, self.out_size,
                   self.pitch)

    def kernel_row(self, row_columns, i):
        """Kernel row i's columns (..., C * kw, length): a view of _row_columns' array."""
        return row_columns[..., i * self.row_shift:i * self.row_shift + self.length]

    def taps(self, padded):
        """The (N, C, kh, kw, length) view, or (..., oh, ow) when strided, of padded images
        whose rows are contiguous."""
        if not self.flat:
            return windows(padded, self.kernel_size, self.dilation, self.stride, self.out_size)
        (dh, dw), (n, c, row, col) = self.dilation, padded.strides
        return _strided(padded, padded.shape[:2] + self.kernel_size + (self.length,),
                          (n, c, dh * row, dw * col, col))

    def padded(self, x, start, stop, step):
        """Images x[start:stop], padded, with contiguous rows: x's own where it has them,
        else in this thread's work array for chunks of `step` images."""
        n, c, h, w = x.shape
        ph, pw = self.padding
        rows_contiguous = x.strides[3] == x.itemsize and x.strides[2] == w * x.itemsize
        if not (ph or pw or (self.flat and not rows_contiguous)):
            return x[start:stop]
        # Only the interior is ever written: the border stays zero across calls.
        buffer = _scratch_array((step, c) + self.padded_size, x.dtype, ("padded", self.padding),
                                zeros=True)
        images = buffer[:stop - start]
        images[:, :, ph:ph + h, pw:pw + w] = x[start:stop]
        return images

    def padded_chunks(self, x, step):
        """(start, stop, images): consecutive chunks of x, padded, with contiguous rows."""
        for start in range(0, x.shape[0], step):
            stop = min(x.shape[0], start + step)
            yield start, stop, self.padded(x, start, stop, min(step, x.shape[0]))

    def spread_buffer(self, step, channels, dtype):
        if self.pitch == self.out_size[1]:
            return None
        # Only the real columns are ever written: the junk stays zero across calls.
        return _scratch_array((step, channels, self.out_size[0] * self.pitch), dtype,
                              ("spread", self.pitch, self.out_size[1]), zeros=True)

    def spread(self, g, buffer):
        """g (N, O, oh, ow) as columns (N, O, length), junk columns zero (never written)."""
        if buffer is None:
            return g.reshape(g.shape[0], g.shape[1], -1)
        n, channels = g.shape[:2]
        full = buffer[:n]
        full.reshape(n, channels, self.out_size[0], self.pitch)[..., :self.out_size[1]] = g
        return full[..., :self.length]

    def crop(self, product):
        """Columns (N, O, length) as the (N, O, oh, ow) view of their real windows."""
        n, c, q = product.strides
        return _strided(product, product.shape[:2] + self.out_size, (n, c, self.pitch * q, q))

    def crop_into(self, product, bias, out, compiled):
        """out = crop(product), plus bias (O,) if given: one compiled pass (compiled/conv.py's
        crop_columns) when `compiled` (the whole output's size is COMPILED_FROM elements or
        more) and the dtypes are float32 or float64, else numpy's."""
        if compiled and out.dtype in (np.float32, np.float64) and product.dtype == out.dtype:
            loops("conv").crop_columns(
                product, np.empty(0, out.dtype) if bias is None else bias.astype(out.dtype),
                bias is not None, self.pitch, out)
        elif bias is None:
            np.copyto(out, self.crop(product))
        else:
            np.add(self.crop(product), bias.reshape(-1, 1, 1), out=out)


def kernel_extent(kernel_size, dilation):
    """How far a dilated kernel reaches along each axis."""
    return tuple(d * (k - 1) + 1 for k, d in zip(kernel_size, dilation))


def _chunk_size(n, column_bytes):
    return min(n, max(1, _CHUNK_BYTES // column_bytes))


# The fewest chunks a batch is cut into (when it has that many samples), so that threads
# (run_chunks) share a convolution whose columns fit one chunk, the tutorial CNN's.
_MIN_CHUNKS = 4


def _chunk_bounds(n, sample_bytes, chunk_bytes=_CHUNK_BYTES):
    """Chunks (start, stop) of n samples of `sample_bytes` of work arrays each: at most
    `chunk_bytes` a chunk, at least _MIN_CHUNKS chunks, all of one size but the last. Set by
    the sizes alone, never by the number of threads, so that a result has the same bits
    however many threads computed its chunks."""
    count = max(-(-n * sample_bytes // chunk_bytes), min(n, _MIN_CHUNKS))
    step = -(-n // count)
    return [(start, min(n, start + step)) for start in range(0, n, step)]


# The fewest K (channels times kernel width) per kernel row for convolutions to take one GEMM
# per kernel row over _row_columns instead of one over full columns. Measured (float32, 3x3,
# 16 and 32 channels, 16x16 and 32x32 images): the forward 30% faster, the weight's gradient
# up to 40%: a third of the copying, and OpenBLAS packs the shorter panels in cache.
_ROW_GEMM_FROM = 32


def _row_columns(x, layout, start, stop, step):
    """Kernel row 0's columns of samples x[start:stop] continued over the image, (stop -
    start, C * kw, span), in this thread's work array for chunks of `step` samples:
    layout.kernel_row gives each kernel row's columns as a view, so im2col copies kw taps per
    channel, not kh * kw."""
    c = x.shape[1]
    buffer = _scratch_array((step, c * layout.kernel_size[1], layout.span), x.dtype,
                            "row columns")[:stop - start]
    _im2col_into(buffer, layout.row_taps(layout.padded(x, start, stop, step)))
    return buffer


def _rows_product(matrices, row_columns, layout, product):
    """product = sum over kernel rows i of matrices[i] (O, C * kw) times row i's columns, the
    rows added in order."""
    np.matmul(matrices[0], layout.kernel_row(row_columns, 0), out=product)
    addend = _scratch_array(product.shape, product.dtype, "row product")
    for i in range(1, len(matrices)):
        np.matmul(matrices[i], layout.kernel_row(row_columns, i), out=addend)
        product += addend


def _columns(x, layout, start, stop, step, side_by_side=False):
    """The columns of samples x[start:stop], (stop - start, C * kh * kw, length), in this
    thread's work array for chunks of `step` samples. `side_by_side` gives them as
    (C * kh * kw, (stop - start) * length) instead: the samples' columns next to each other,
    for one GEMM over the whole chunk."""
    c = x.shape[1]
    if layout.pointwise and not side_by_side:
        return x[start:stop].reshape(stop - start, c, -1)  # the image is its own columns
    rows = c * layout.kernel_size[0] * layout.kernel_size[1]
    buffer = _scratch_array((step, rows, layout.length), x.dtype, "columns")
    taps = layout.taps(layout.padded(x, start, stop, step))
    size = stop - start
    if side_by_side:
        cols = buffer.reshape(-1)[:size * rows * layout.length].reshape(rows, -1)
        _im2col_into(cols, taps.transpose((1, 2, 3, 0) + tuple(range(4, taps.ndim))))
    else:
        cols = buffer[:size]
        _im2col_into(cols, taps)
    return cols


def conv2d(x, weight, bias, stride, padding, dilation, groups=1):
    if x.shape[0] == 0:  # an empty batch (no chunks to cut)
        return np.zeros((0, weight.shape[0]) + sliding_output_size(
            x.shape[2:], weight.shape[2:], dilation, padding, stride), np.result_type(x, weight))
    out_size = sliding_output_size(x.shape[2:], weight.shape[2:], dilation, padding, stride)
    if onednn.takes("forward", (x, weight), weight.shape, groups):
        out = onednn.conv2d(x, weight, bias, stride, padding, dilation, out_size)
        if out is not None:
            return out
    if groups > 1:
        return _grouped_conv2d(x, weight, bias, stride, padding, dilation, groups)
    if winograd_fits("conv2d", weight.shape, stride, dilation, out_size):
        return _winograd_conv2d(x, weight, bias, padding)
    if direct_conv2d_fits(x.shape, weight.shape, stride, dilation, out_size):
        return _conv2d_3x3(x, weight, bias, padding)
    n, out_channels = x.shape[0], weight.shape[0]
    layout = _Columns(x.shape[2:], weight.shape[2:], dilation, padding, stride)
    dtype = np.result_type(x, weight)
    out = np.empty((n, out_channels) + layout.out_size, dtype)
    compiled_crop = out.size >= COMPILED_FROM
    by_rows = layout.by_kernel_rows(x.shape[1])
    if by_rows:  # (kh, O, C * kw): one matrix per kernel row
        matrices = np.ascontiguousarray(weight.transpose(2, 0, 1, 3)).reshape(
            weight.shape[2], out_channels, -1)
        sample_bytes = matrices.shape[2] * layout.span * x.itemsize
    else:
        matrix = weight.reshape(out_channels, -1)
        sample_bytes = matrix.shape[1] * layout.length * x.itemsize
    bounds = _chunk_bounds(n, sample_bytes)
    step = bounds[0][1]

    def compute(k):
        start, stop = bounds[k]
        chunk = out[start:stop]
        direct = layout.pitch == layout.out_size[1]
        product = (chunk.reshape(stop - start, out_channels, -1) if direct else
                   _scratch_array((stop - start, out_channels, layout.length), dtype, "product"))
        if by_rows:
            _rows_product(matrices, _row_columns(x, layout, start, stop, step), layout,
                          product)
        else:
            np.matmul(matrix, _columns(x, layout, start, stop, step), out=product)
        if not direct:  # crop the junk columns (and add the bias) in one pass
            layout.crop_into(product, bias, chunk, compiled_crop)
        elif bias is not None:
            chunk += bias.reshape(out_channels, 1, 1)  # while the chunk is in cache
    run_chunks(compute, len(bounds))
    return out


def conv_transpose2d(g, weight, input_size, stride, padding, dilation, groups=1):
    """The input's gradient of conv2d. Without stride it is again a correlation: of g padded
    by d (k - 1) - padding, with the kernel flipped and each group's channels swapped, which
    costs what the forward does (im2col and a GEMM; for 3x3 kernels with enough channels,
    Winograd's). With stride, a padding beyond the kernel, or an input much bigger than the
    output, columns W^T g are folded back onto the image."""
    if g.shape[0] == 0:
        return np.zeros((0, weight.shape[1] * groups) + tuple(input_size),
                        np.result_type(g, weight))
    if onednn.takes("data", (g, weight), weight.shape, groups):
        out = onednn.conv_transpose2d(g, weight, input_size, stride, padding, dilation)
        if out is not None:
            return out
    extent = kernel_extent(weight.shape[2:], dilation)
    if _correlation_fits(input_size, g.shape[2:], stride, padding, extent):
        flipped = _flipped_transposed(weight, groups)
        flipped_padding = tuple(e - 1 - p for p, e in zip(padding, extent))
        if groups == 1 and winograd_fits("conv_transpose2d", weight.shape, stride, dilation,
                                         input_size):
            return _winograd_conv2d(g, flipped, None, flipped_padding)
        return conv2d(g, flipped, None, stride, flipped_padding, dilation, groups)
    if groups > 1:
        return _grouped_conv_transpose2d(g, weight, input_size, stride, padding, dilation,
                                         groups)
    n, out_channels = g.shape[:2]
    channels = weight.shape[1]
    layout = _Columns(input_size, weight.shape[2:], dilation, padding, stride)
    matrix = weight.reshape(out_channels, -1).T
    dtype = np.result_type(g, weight)
    out = np.empty((n, channels) + layout.in_size, dtype)
    bounds = _chunk_bounds(n, matrix.shape[0] * layout.length * dtype.itemsize)
    step = bounds[0][1]

    def compute(k):
        start, stop = bounds[k]
        size = stop - start
        cols = _scratch_array((step, matrix.shape[0], layout.length), dtype, "columns")[:size]
        spread = layout.spread_buffer(step, out_channels, g.dtype)
        np.matmul(matrix, layout.spread(g[start:stop], spread), out=cols)
        image = _scratch_array((step, channels) + layout.padded_size, dtype, "images")[:size]
        image.fill(0)
        layout.fold_into(image, cols)
        out[start:stop] = _crop(image, padding, layout.in_size)
    run_chunks(compute, len(bounds))
    return out


# How many times the outputs' area the input's may be for its gradient to be computed as a
# correlation: each input pixel then takes a whole window of g, its zero border included,
# where folding columns multiplies only the outputs' own pixels. Measured (float32, batch 32
# and 64): the correlation takes 0.56-0.92x the time of folding for inputs 1 to 1.8 times the
# outputs' area, 1.27x for 2.25 times (the tutorial CNN's unpadded 5x5 on 8x8 outputs).
_CORRELATION_MAX_GROWTH = 2.0


def _correlation_fits(input_size, out_size, stride, padding, extent):
    """Whether conv_transpose2d is computed as a correlation of g: without stride, with a
    padding inside the kernel, and with few products of g's zero border."""
    return (tuple(stride) == (1, 1) and all(p < e for p, e in zip(padding, extent))
            and input_size[0] * input_size[1] <= _CORRELATION_MAX_GROWTH * out_size[0]
            * out_size[1])


def _flipped_transposed(weight, groups):
    """weight (O, C / groups, kh, kw) with each group's channels swapped and the kernel
    flipped, (C, O / groups, kh, kw): the kernel whose correlation is the transposed one."""
    out_channels, per_group = weight.shape[:2]
    grouped = weight.reshape((groups, out_channels // groups) + weight.shape[1:])
    # Contiguous: matmul takes BLAS only for positive strides.
    flipped = np.ascontiguousarray(grouped.transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1])
    return flipped.reshape((per_group * groups, out_channels // groups) + weight.shape[2:])


def conv2d_weight(x, g, kernel_size, stride, padding, dilation, groups=1):
    """The weight's gradient of conv2d: g times the columns, summed over the samples."""
    if x.shape[0] == 0:
        return np.zeros((g.shape[1], x.shape[1] // groups) + tuple(kernel_size),
                        np.result_type(x, g))
    weight_shape = (g.shape[1], x.shape[1] // groups) + tuple(kernel_size)
    if onednn.takes("weights", (x, g), weight_shape, groups):
        out = onednn.conv2d_weight(x, g, kernel_size, stride, padding, dilation)
        if out is not None:
            return out
    if groups > 1:
        return _grouped_conv2d_weight(x, g, kernel_size, stride, padding, dilation, groups)
    if winograd_fits("conv2d_weight", g.shape[1:2] + x.shape[1:2] + tuple(kernel_size),
                     stride, dilation, g.shape[2:]):
        return _winograd_conv2d_weight(x, g, padding)
    if direct_weight_gradient_fits(x.shape, g.shape[1], kernel_size, stride, dilation):
        direct = _conv2d_weight_direct(x, g, tuple(kernel_size)[0], padding)
        # Its dot products also run over the grid's cells where no output is (g zero there),
        # so an inf or nan in x reaches taps that torch's gradient keeps finite (0 * inf);
        # such rare inputs take the columns, checked on the small result.
        if np.isfinite(direct).all():
            return direct
    n, out_channels = g.shape[:2]
    layout = _Columns(x.shape[2:], kernel_size, dilation, padding, stride)
    rows = x.shape[1] * kernel_size[0] * kernel_size[1]
    # The gradient's transpose, columns times g^T: OpenBLAS takes 0.6-0.95x the time of
    # g times columns^T for the same product (measured from 16 to 128 channels, 8x8 to 32x32
    # images), the more so the fewer output channels.
    dtype = np.result_type(x, g)
    # Few columns per sample (fewer than rows): one GEMM over the chunk's samples side by side
    # beats a thin GEMM per sample (by kernel rows too: 10% on 32 channels of 16x16, 64 of
    # 8x8); otherwise the per-sample GEMMs are the faster ones.
    side_by_side = layout.length < rows
    if layout.by_kernel_rows(x.shape[1]) and not side_by_side:
        return _conv2d_weight_by_rows(x, g, layout, dtype)
    bounds = _chunk_bounds(n, rows * layout.length * x.itemsize)
    step = bounds[0][1]

    def chunk_sum(k):
        start, stop = bounds[k]
        cols = _columns(x, layout, start, stop, step, side_by_side)
        g_cols = layout.spread(g[start:stop], layout.spread_buffer(step, out_channels, g.dtype))
        if side_by_side:
            return cols @ g_cols.transpose(1, 0, 2).reshape(out_channels, -1).T
        return np.matmul(cols, g_cols.transpose(0, 2, 1)).sum(0)
    total = np.zeros((rows, out_channels), dtype)
    for part in run_chunks(chunk_sum, len(bounds)):  # in chunk order, on any thread count
        total += part
    return np.ascontiguousarray(total.T).reshape((out_channels, x.shape[1])
                                                 + tuple(kernel_size))


def _conv2d_weight_by_rows(x, g, layout, dtype):
    """conv2d_weight over _row_columns: each kernel row's (C * kw, O) block from its view of
    the columns, per sample."""
    n, out_channels = g.shape[:2]
    kh, kw = layout.kernel_size
    bounds = _chunk_bounds(n, x.shape[1] * kw * layout.span * x.itemsize)
    step = bounds[0][1]

    def chunk_sum(k):
        start, stop = bounds[k]
        row_columns = _row_columns(x, layout, start, stop, step)
        g_t = layout.spread(g[start:stop], layout.spread_buffer(step, out_channels, g.dtype)
                            ).transpose(0, 2, 1)
        return np.stack([np.matmul(layout.kernel_row(row_columns, i), g_t).sum(0)
                         for i in range(kh)])
    total = np.zeros((kh, x.shape[1] * kw, out_channels), dtype)
    for part in run_chunks(chunk_sum, len(bounds)):  # in chunk order, on any thread count
        total += part
    return np.ascontiguousarray(
        total.reshape(kh, x.shape[1], kw, out_channels).transpose(3, 1, 0, 2))


# ----------------------------------------------------------------------------- direct
# The widest channel count (input or output) and the narrowest output for which conv2d takes
# _conv2d_3x3 (float32, batch 32): 0.55-0.8x the column path's time on 32 x 32 images with 3
# to 32 channels on each side, and on 64 x 64 ones; 1.1x with 32 channels on 16 x 16 images
# (short rows), 1.1x from 3 to 64 channels, 2.4x with 64 on 8 x 8 (there the GEMM is not
# thin).
_DIRECT_CONV_MAX_CHANNELS = 32
_DIRECT_CONV_MIN_WIDTH = 32


def direct_conv2d_fits(x_shape, weight_shape, stride, dilation, out_size):
    """Whether conv2d takes _conv2d_3x3: 3x3, stride 1, undilated, few channels, wide
    outputs, and an input of COMPILED_FROM elements or more (so that a small model never
    imports numba)."""
    out_channels, channels, kh, kw = weight_shape
    return ((kh, kw) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)
            and max(channels, out_channels) <= _DIRECT_CONV_MAX_CHANNELS
            and out_size[1] >= _DIRECT_CONV_MIN_WIDTH and math.prod(x_shape) >= COMPILED_FROM)


def _conv2d_3x3(x, weight, bias, padding):
    """conv2d of a 3x3 stride-1 convolution by compiled/conv.py's convolution_3x3 over each
    chunk's padded images (no columns), the junk columns of the flat layout cropped as the
    bias is added (taken only where numba is in use anyway, so the crop is compiled too)."""
    n, channels, out_channels = x.shape[0], x.shape[1], weight.shape[0]
    given = np.result_type(x, weight)
    dtype = np.dtype(compute_dtype(given))  # the compiled loop's (float16 via float32)
    x = x.astype(dtype, copy=False)
    layout = _Columns(x.shape[2:], (3, 3), (1, 1), tuple(padding), (1, 1))
    rows = -(-out_channels // 4) * 4  # the loop takes output channels in fours
    weights = np.zeros((rows, channels, 9), dtype)
    weights[:out_channels] = weight.reshape(out_channels, channels, 9)
    out = np.empty((n, out_channels) + layout.out_size, dtype)
    bounds = _chunk_bounds(n, channels * math.prod(layout.padded_size) * dtype.itemsize)
    step = bounds[0][1]

    def compute(k):
        start, stop = bounds[k]
        images = layout.padded(x, start, stop, step)
        product = _scratch_array((step, rows, layout.length), dtype, "direct product")
        product = product[:stop - start]
        loops("conv").convolution_3x3(images.reshape(stop - start, channels, -1), weights,
                                      layout.pitch, product)
        layout.crop_into(product[:, :out_channels], bias, out[start:stop], True)
    run_chunks(compute, len(bounds))
    return result(out, given)


# The padded images of a chunk of samples end to end, each channel one row, for
# _conv2d_weight_direct's dot products: at most this many bytes of them and of the gradients
# a chunk. Each pair of output channels sums its dot products out of vector lanes once per
# chunk, which costs as much as a 16 x 16 image's products: on such images the 3x3 loop took
# 3.5 ms for one sample a chunk, 2.4 from four on (32 channels, batch 32); 32 x 32 ones do
# not care. Four to sixteen samples of the ResNet's and the tutorial CNN's layers.
_DIRECT_CHUNK_BYTES = 768 << 10

# The most (input, output) channel pairs for which _conv2d_weight_direct beats the column
# path (float32, batch 32, 3x3, 8x8 to 32x32 images): 0.6-0.8x its time at 16 and 32
# channels, 1.1-1.8x at 64, 1.5-2.5x at 128, where the column path's GEMMs are no longer thin.
_DIRECT_MAX_PAIRS = 32 * 32
_DIRECT_LOOPS = {3: "weight_gradient_3x3", 5: "weight_gradient_5x5"}


def direct_weight_gradient_fits(x_shape, out_channels, kernel_size, stride, dilation):
    """Whether conv2d_weight takes _conv2d_weight_direct: a 3x3 or 5x5 kernel, stride 1,
    undilated, few enough channels, and an input of COMPILED_FROM elements or more (so that a
    small model's backward never imports numba)."""
    kh, kw = kernel_size
    return (kh == kw and kh in _DIRECT_LOOPS and tuple(stride) == (1, 1)
            and tuple(dilation) == (1, 1) and x_shape[1] * out_channels <= _DIRECT_MAX_PAIRS
            and math.prod(x_shape) >= COMPILED_FROM)


def _conv2d_weight_direct(x, g, k, padding):
    """conv2d_weight of a k x k stride-1 convolution (k 3 or 5): compiled/conv.py's
    weight_gradient loops over chunks of samples, the images padded and the gradients spread
    onto the images' grid (zero where no output is), each laid out channel by channel."""
    n, channels, out_channels = x.shape[0], x.shape[1], g.shape[1]
    given = np.result_type(x, g)
    dtype = np.dtype(compute_dtype(given))  # the compiled loop's (float16 via float32)
    (ph, pw), (h, w), (oh, ow) = padding, x.shape[2:], g.shape[2:]
    height, pitch = h + 2 * ph, w + 2 * pw
    plane = height * pitch
    reach = (k - 1) * (pitch + 1)  # how far past an output's position its taps read
    rows = out_channels + out_channels % 2  # the loops take output channels in pairs
    bounds = _chunk_bounds(n, (channels + rows) * plane * dtype.itemsize, _DIRECT_CHUNK_BYTES)
    step = bounds[0][1]
    shape_key = (x.shape[1:], g.shape[1:], tuple(padding))
    loop = getattr(loops("conv"), _DIRECT_LOOPS[k])

    def chunk_sum(i):
        start, stop = bounds[i]
        length = (stop - start) * plane
        # Zero where nothing is written: the images' borders, the gradients' columns and rows
        # beyond the outputs, an odd last output channel's partner row.
        images = _scratch_array((channels, step * plane + reach), dtype,
                                ("direct images", shape_key), zeros=True)
        gradients = _scratch_array((rows, step * plane), dtype,
                                   ("direct gradients", shape_key), zeros=True)
        images[:, length:] = 0  # read past the last sample of a shorter last chunk
        images[:, :length].reshape(channels, -1, height, pitch)[:, :, ph:ph + h, pw:pw + w] = (
            x[start:stop].transpose(1, 0, 2, 3))
        gradients[:out_channels, :length].reshape(out_channels, -1, height, pitch)[
            :, :, :oh, :ow] = g[start:stop].transpose(1, 0, 2, 3)
        part = np.zeros((rows, channels, k * k), dtype)
        loop(images, gradients[:, :length], pitch, part)
        return part
    total = np.zeros((rows, channels, k * k), dtype)
    for part in run_chunks(chunk_sum, len(bounds)):  # in chunk order, on any thread count
        total += part
    return result(total[:out_channels].reshape(out_channels, channels, k, k), given)


# ----------------------------------------------------------------------------- grouped
# With groups, the columns of one sample, (C * kh * kw, length) channel-major, are already
# (groups, C / groups * kh * kw, length): one small GEMM per group, all of a sample's groups
# in one batched matmul. A depthwise convolution (one channel per group) is then one
# (multiplier x kh * kw) by (kh * kw x length) product per channel, which beats im2col into
# a block-diagonal GEMM and the sum of kh * kw shifted, scaled copies alike (2-3x, measured
# in numpy on 8x8 to 32x32 images). Samples go one at a time so that their columns stay in
# cache between im2col and the GEMM.
def _group_matrix(weight, groups):
    """weight (O, C / groups, kh, kw) as (groups, O / groups, C / groups * kh * kw)."""
    return weight.reshape(groups, weight.shape[0] // groups, -1)


def _grouped_conv2d(x, weight, bias, stride, padding, dilation, groups):
    n, out_channels = x.shape[0], weight.shape[0]
    layout = _Columns(x.shape[2:], weight.shape[2:], dilation, padding, stride)
    matrix = _group_matrix(weight, groups)
    dtype = np.result_type(x, weight)
    out = np.empty((n, out_channels) + layout.out_size, dtype)
    rows = x.shape[1] * weight.shape[2] * weight.shape[3]
    cols = _scratch_array((rows, layout.length), x.dtype, "columns")
    product = _scratch_array((1, out_channels, layout.length), dtype, "product")
    per_group = product.reshape(groups, -1, layout.length)
    compiled_crop = out.size >= COMPILED_FROM
    step = _chunk_size(n, rows * layout.length * x.itemsize)
    for start, stop, images in layout.padded_chunks(x, step):
        taps = layout.taps(images)
        for k in range(stop - start):
            _im2col_into(cols, taps[k])
            np.matmul(matrix, cols.reshape(groups, -1, layout.length), out=per_group)
            layout.crop_into(product, bias, out[start + k:start + k + 1], compiled_crop)
    return out


def _grouped_conv_transpose2d(g, weight, input_size, stride, padding, dilation, groups):
    """With stride (or a padding beyond the kernel): a depthwise gradient adds each tap's
    scaled g into the image, and other groups fold their columns W^T g back onto it."""
    n, out_channels = g.shape[:2]
    channels = weight.shape[1] * groups
    layout = _Columns(input_size, weight.shape[2:], dilation, padding, stride)
    dtype = np.result_type(g, weight)
    if out_channels == channels == groups:
        # Depthwise: each tap's scaled gradient added into its view of the whole batch, which
        # saves the per-sample passes (the columns are one outer product per channel).
        image = np.zeros((n, channels) + layout.padded_size, dtype)
        taps = windows(image, weight.shape[2:], dilation, stride, layout.out_size)
        # Chunks of samples whose image stays in cache over the taps.
        step = _chunk_size(n, image[0].nbytes)
        scaled = np.empty((step,) + g.shape[1:], dtype)
        for start in range(0, n, step):
            stop = min(n, start + step)
            chunk, product = taps[start:stop], scaled[:stop - start]
            for i in range(weight.shape[2]):
                for j in range(weight.shape[3]):
                    np.multiply(g[start:stop], weight[:, 0, i, j, None, None], out=product)
                    chunk[:, :, i, j] += product
        return _crop(image, padding, layout.in_size)
    matrix = _group_matrix(weight, groups).transpose(0, 2, 1)
    out = np.empty((n, channels) + layout.in_size, dtype)
    step = _chunk_size(n, channels * weight.shape[2] * weight.shape[3] * layout.length
                       * dtype.itemsize)
    cols = _scratch_array((step, groups) + matrix.shape[1:2] + (layout.length,), dtype,
                          "columns")
    spread = layout.spread_buffer(step, out_channels, g.dtype)
    images = _scratch_array((step, channels) + layout.padded_size, dtype, "images")
    for start in range(0, n, step):
        size = min(n, start + step) - start
        g_cols = layout.spread(g[start:start + size], spread)
        np.matmul(matrix, g_cols.reshape(size, groups, -1, g_cols.shape[-1]), out=cols[:size])
        image = images[:size]
        image.fill(0)
        layout.fold_into(image, cols[:size].reshape(size, -1, layout.length))
        out[start:start + size] = _crop(image, padding, layout.in_size)
    return out


def _grouped_conv2d_weight(x, g, kernel_size, stride, padding, dilation, groups):
    n, out_channels = g.shape[:2]
    layout = _Columns(x.shape[2:], kernel_size, dilation, padding, stride)
    rows = x.shape[1] * kernel_size[0] * kernel_size[1]
    dtype = np.result_type(x, g)
    total = np.zeros((groups, out_channels // groups, rows // groups), dtype)
    cols = _scratch_array((rows, layout.length), x.dtype, "columns")
    spread = layout.spread_buffer(1, out_channels, g.dtype)
    step = _chunk_size(n, rows * layout.length * x.itemsize)
    for start, stop, images in layout.padded_chunks(x, step):
        taps = layout.taps(images)
        for k in range(stop - start):
            _im2col_into(cols, taps[k])
            g_cols = layout.spread(g[start + k:start + k + 1], spread)
            total += np.matmul(g_cols.reshape(groups, -1, layout.length),
                               cols.reshape(groups, -1, layout.length).transpose(0, 2, 1))
    return total.reshape((out_channels, x.shape[1] // groups) + tuple(kernel_size))


# ----------------------------------------------------------------------------- Winograd
# F(2x2, 3x3): each 2x2 block of outputs of a 3x3 stride-1 correlation is A^T [(G w G^T) .
# (B^T d B)] A, d the 4x4 input tile under it. Per output that is 4 multiplications (at each
# of the 16 transform points, one GEMM over the channels) instead of 9; the transforms are
# adds over shifted runs of the images. B and A have entries 0 and +-1, G 0, 1/2 and 1, so
# in exact arithmetic the result is the direct one and float32 rounding stays that of a short
# sum (as torch's, see the tests). F(4x4, 3x3) would save more multiplications, but its
# transforms hold 2, 4, 8 and 1/4, 1/6, 1/24, which cost float32 accuracy, and twice the
# adds per point; not tried.
_WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])


def winograd_fits(op, weight_shape, stride, dilation, out_size):
    """Whether the Winograd path computes `op` ("conv2d", "conv_transpose2d" or
    "conv2d_weight") of this convolution: 3x3, stride 1, undilated, and big enough that its
    GEMMs (K = in channels, M = out channels) outweigh its transforms and junk tiles."""
    out_channels, channels, kh, kw = weight_shape
    min_channels, min_area = _WINOGRAD_FROM[op]
    return ((kh, kw) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)
            and min(channels, out_channels) >= min_channels
            and out_size[0] * out_size[1] >= min_area)


# Per op, the fewest channels (on both sides) and output pixels per image that take the
# Winograd path; measured with jobs/bench/bench_winograd.py at batch 32 on a shared machine
# (single runs vary by 10-20%), against the column paths as they are now: the input's
# gradient a correlation like the forward (no col2im), the weight's gradient computed
# transposed. Both then win by Winograd only on bigger images: the input's gradient is even
# on 16x16 and gains 7-30% on 32x32 (at 32 and 64 channels), the weight's gradient loses
# 5-25% on 16x16 and gains 9% on 32x32; the forward gains 10% from 64 channels on 16x16, and
# 20-30% on 32x32 (32 channels there too, not taken: each threshold is on its own). On 8x8
# images a third of the tiles are junk and all lose; at 16 channels every op loses (1.6-2.1x).
_WINOGRAD_FROM = {"conv2d": (64, 16 * 16), "conv2d_weight": (32, 32 * 32),
                  "conv_transpose2d": (32, 16 * 16)}


class _Tiles:
    """The 2x2 output tiles of a 3x3 stride-1 convolution of images `in_size` with
    `padding`, (th, tw) of them per image (the last row or column overhangs an odd output),
    each transform one compiled pass over a chunk of samples (compiled/conv.py). A point's
    values are laid out channel by channel, then sample, then tile row and column, so that
    each of the 16 points' GEMMs takes one (channels, tiles) matrix. The grid has a junk
    row and column of tiles ((th + 1, tw + 1) per image; transformed from zeros, dropped
    from outputs): without them a power-of-two image made the points' strides multiples of
    4 KiB, and the passes and GEMMs took up to twice as long (cache sets)."""

    def __init__(self, in_size, padding):
        self.in_size, self.padding = tuple(in_size), tuple(padding)
        self.out_size = tuple(s + 2 * p - 2 for s, p in zip(in_size, padding))
        self.tiles = tuple((o + 1) // 2 for o in self.out_size)
        self.grid = tuple(t + 1 for t in self.tiles)
        self.per_sample = self.grid[0] * self.grid[1]

    def chunk_bounds(self, n, channels, itemsize):
        return _chunk_bounds(n, 16 * channels * self.per_sample * itemsize)

    def transform_input(self, x, start, stop, out):
        """B^T d B of every 4x4 tile of images x[start:stop], into `out` (4, 4, C, length):
        one compiled pass (compiled/conv.py's winograd_input)."""
        # the padded image as far as the tiles read, its border zero across calls
        padded = _scratch_array((2 * self.grid[0] + 2, 2 * self.grid[1] + 2), out.dtype,
                                ("winograd padded", self.in_size, self.padding), zeros=True)
        loops("conv").winograd_input(x[start:stop], *self.padding, padded,
                                     out.reshape(16, -1))

    def transform_gradient(self, g, start, stop, out):
        """The adjoint of untransform_output: A g A^T of every 2x2 tile of g[start:stop],
        junk tiles and the overhang zero, into `out` (4, 4, O, length): one compiled pass
        (compiled/conv.py's winograd_gradient)."""
        loops("conv").winograd_gradient(g[start:stop], *self.grid, out.reshape(16, -1))

    def untransform_output(self, products, bias, out, start):
        """A^T m A of every tile's 16 points `products` (4, 4, O, length) into the outputs
        out[start:...], plus bias: one compiled pass (compiled/conv.py's winograd_output)."""
        size = products.shape[3] // self.per_sample
        loops("conv").winograd_output(products.reshape(16, -1),
                                      np.empty(0, products.dtype) if bias is None else bias,
                                      bias is not None, *self.grid, out[start:start + size])


def _winograd_points(x, tiles, start, stop, step, out_channels, dtype):
    """For samples x[start:stop] of chunks of `step`: their tiles' transformed inputs
    `points` (4, 4, C, length) and a work array `products` (4, 4, out_channels, length) for
    the GEMMs' side, both this thread's and contiguous even for the last, shorter chunk."""
    channels = x.shape[1]
    length = (stop - start) * tiles.per_sample
    buffer = _scratch_array((16 * channels * step * tiles.per_sample,), dtype, "winograd in")
    points = buffer[:16 * channels * length].reshape(4, 4, channels, length)
    tiles.transform_input(x, start, stop, points)
    return points, _scratch_array((4, 4, out_channels, length), dtype, "winograd products")


def _winograd_conv2d(x, weight, bias, padding):
    n, channels, out_channels = x.shape[0], x.shape[1], weight.shape[0]
    tiles = _Tiles(x.shape[2:], padding)
    given = np.result_type(x, weight)
    dtype = np.dtype(compute_dtype(given))  # the compiled transforms' (float16 via float32)
    x = x.astype(dtype, copy=False)
    bias = None if bias is None else bias.astype(dtype, copy=False)
    # G w G^T of each 3x3 kernel, as (4, 4, O, C): one (O, C) matrix per point.
    transformed = np.tensordot(_WINOGRAD_G, np.tensordot(weight, _WINOGRAD_G, (3, 1)), (1, 2))
    transformed = np.ascontiguousarray(transformed.transpose(0, 3, 1, 2), dtype)
    transformed = transformed.reshape(16, out_channels, channels)
    out = np.empty((n, out_channels) + tiles.out_size, dtype)
    bounds = tiles.chunk_bounds(n, channels, dtype.itemsize)

    def compute(k):
        start, stop = bounds[k]
        points, products = _winograd_points(x, tiles, start, stop, bounds[0][1], out_channels,
                                            dtype)
        np.matmul(transformed, points.reshape(16, channels, -1),
                  out=products.reshape(16, out_channels, -1))
        tiles.untransform_output(products, bias, out, start)
    run_chunks(compute, len(bounds))
    return result(out, given)


def _winograd_conv2d_weight(x, g, padding):
    """conv2d_weight through the transposes of the forward's transforms: the points' GEMMs
    sum over samples and tiles, G^T . G takes the sum back to 3x3."""
    channels, out_channels = x.shape[1], g.shape[1]
    tiles = _Tiles(x.shape[2:], padding)
    given = np.result_type(x, g)
    dtype = np.dtype(compute_dtype(given))  # the compiled transforms' (float16 via float32)
    x, g = x.astype(dtype, copy=False), g.astype(dtype, copy=False)
    bounds = tiles.chunk_bounds(x.shape[0], channels, dtype.itemsize)

    def chunk_sum(k):
        start, stop = bounds[k]
        points, gradients = _winograd_points(x, tiles, start, stop, bounds[0][1], out_channels,
                                             dtype)
        tiles.transform_gradient(g, start, stop, gradients)
        return np.matmul(gradients.reshape(16, out_channels, -1),
                         points.reshape(16, channels, -1).transpose(0, 2, 1))
    total = np.zeros((16, out_channels, channels), dtype)
    for part in run_chunks(chunk_sum, len(bounds)):  # in chunk order, on any thread count
        total += part
    total = np.tensordot(_WINOGRAD_G, total.reshape(4, 4, out_channels, channels), (0, 0))
    return result(np.ascontiguousarray(
        np.tensordot(total, _WINOGRAD_G, (1, 0)).transpose(1, 2, 0, 3), dtype), given)


# ----------------------------------------------------------------------------- max pooling
def _taps(padded, kernel_size, dilation, stride):
    """Each tap's (N, C, oh, ow) view, in torch's order (row by row); the output size follows
    from the padded size, with ceil_mode's extra padding already in."""
    out_size = sliding_output_size(padded.shape[2:], kernel_size, dilation, (0, 0), stride)
    view = windows(padded, kernel_size, dilation, stride, out_size)
    return [view[:, :, i, j] for i in range(kernel_size[0]) for j in range(kernel_size[1])]


# The smallest input whose pooling is split among threads: below it a second thread's start
# cost more than it saved (max pooling, batches of 10 x 24 x 24 images, one thread against
# two: 1.4 MiB 0.22 against 0.28 ms, 2.8 MiB 0.45 against 0.52; 5.6 MiB 1.04 against 0.90).
_POOL_THREADS_FROM = 4 << 20


def _pool_by_samples(x, compute):
    """compute(start, stop) for chunks of x's samples, each at most _CHUNK_BYTES of x, on
    `set_num_threads` threads: from _POOL_THREADS_FROM bytes on, a chunk per thread at least.
    The pools' passes pick, copy and place values, or add one value per cell, so any
    chunking gives the same bits, and the chunk count may follow the thread count."""
    n = x.shape[0]
    threads = get_num_threads() if x.nbytes >= _POOL_THREADS_FROM else 1
    count = min(n, max(-(-x.nbytes // _CHUNK_BYTES), threads))
    if count == 0:
        return
    step = -(-n // count)
    run_chunks(lambda k: compute(k * step, min(n, (k + 1) * step)), -(-n // step))


def max_pool2d(x, kernel_size, stride, padding, dilation, extra):
    """Each window's maximum, and which of its taps holds it (i kw + j: the first maximum,
    or the last nan, as torch), kept for the backward: one compiled pass over the windows.
    Padding and ceil_mode's extra windows count only the taps inside the image."""
    padded_size = tuple(s + 2 * p + e for s, p, e in zip(x.shape[2:], padding, extra))
    out_size = sliding_output_size(padded_size, kernel_size, dilation, (0, 0), stride)
    # Integers are compared as they are (float64 would round the large ones).
    work = np.dtype(x.dtype if x.dtype.kind in "iu" else compute_dtype(x.dtype))
    source = np.ascontiguousarray(x, work)
    out = np.empty(x.shape[:2] + out_size, work)
    taps = kernel_size[0] * kernel_size[1]
    winners = np.empty(out.shape, np.uint8 if taps <= 256 else np.int64)
    lowest = np.array(np.iinfo(work).min if work.kind in "iu" else -np.inf, work)[()]
    pool = loops("conv").pool_max
    _pool_by_samples(x, lambda start, stop: pool(source[start:stop], kernel_size, stride,
                                                 padding, dilation, lowest, out[start:stop],
                                                 winners[start:stop]))
    return result(out, x.dtype), winners


def max_pool2d_backward(needs, g, ans, x, kernel_size, stride, padding, dilation, extra, kept):
    """The input's gradient from the winners the forward kept."""
    return (tap_scatter(g, kept, x.shape[2:], kernel_size, stride, padding, dilation, extra),)


def winning_taps(x, kernel_size, stride, padding, dilation, extra):
    """Which tap of each window holds its maximum (max_pool2d's winners), for the gradient
    rules and return_indices."""
    return max_pool2d(x, kernel_size, stride, padding, dilation, extra)[1]


def tap_scatter(g, winners, input_size, kernel_size, stride, padding, dilation, extra):
    """Each window's gradient added at its winning tap of an input-sized zero image, in
    window order (one compiled pass, compiled/conv.py)."""
    out = np.empty(g.shape[:2] + tuple(input_size), compute_dtype(g.dtype))
    grad = np.ascontiguousarray(g, out.dtype)
    scatter = loops("conv").pool_scatter
    _pool_by_samples(out, lambda start, stop: scatter(grad[start:stop], winners[start:stop],
                                                      kernel_size, stride, padding, dilation,
                                                      out[start:stop]))
    return result(out, g.dtype)


def tap_gather(x, winners, kernel_size, stride, padding, dilation, extra):
    taps = _taps(_pad(x, padding, 0, extra), kernel_size, dilation, stride)
    out = np.empty(winners.shape, x.dtype)
    for t, tap in enumerate(taps):
        np.copyto(out, tap, where=winners == t)
    return out
