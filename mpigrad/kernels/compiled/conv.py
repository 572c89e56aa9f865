"""The sliding-window ops' compiled loops (kernels/numpy/conv.py): col2im, columns added
back onto the images their windows came from (the folds: the input's gradient of a strided
convolution, F.fold; numpy did it as one strided add per tap, whose inner loops run along a
window row of a few elements), the flat layout's crop, Winograd's transforms, a direct 3x3
convolution, the weight gradient of 3x3 and 5x5 convolutions, and max pooling, forward
and backward (below)."""
import numpy as np

from ._math import jit, lanes_jit, multiply_add


@jit
def fold_add(cols, image, kernel_width, tap_steps, window_steps, out_rows, out_cols, pitch):
    """image[n, c, i tap_steps[0] + j tap_steps[1] + r window_steps[0] + s window_steps[1]]
    += cols[n, (c kh + i) kw + j, r pitch + s] for r < out_rows, s < out_cols: tap after tap
    (i, j) in order, as numpy's per-tap adds were, so a cell covered by several windows adds
    them in the same order. cols (N, C kh kw, length) and image (N, C, H W) are contiguous;
    the steps are flat offsets within one channel's image."""
    channels = image.shape[1]
    taps = cols.shape[1] // channels
    kernel_height = taps // kernel_width
    for n in range(image.shape[0]):
        for c in range(channels):
            plane = image[n, c]
            for i in range(kernel_height):
                for j in range(kernel_width):
                    column_row = cols[n, c * taps + i * kernel_width + j]
                    tap = i * tap_steps[0] + j * tap_steps[1]
                    for r in range(out_rows):
                        window = tap + r * window_steps[0]
                        start = r * pitch
                        # Views indexed by the loop's own counter: numba then drops its
                        # negative-index test, which kept the loops scalar (2.5-4x slower).
                        values = column_row[start:start + out_cols]
                        if window_steps[1] == 1:  # a contiguous run (its own loop: vectorised)
                            run = plane[window:window + out_cols]
                            for s in range(out_cols):
                                run[s] += values[s]
                        else:
                            spaced = plane[window:window + (out_cols - 1) * window_steps[1] + 1:
                                           window_steps[1]]
                            for s in range(out_cols):
                                spaced[s] += values[s]


@jit
def crop_columns(product, bias, has_bias, pitch, out):
    """out[n, o, r, s] = product[n, o, r pitch + s], plus bias[o] when has_bias: a
    convolution's columns in the flat layout (kernels/numpy/conv.py's _Columns) without their
    junk. numpy's strided copy, and more its add of a broadcast bias, run an inner loop per
    output row (0.37 ms for the tutorial CNN's first layer's output, batch 64)."""
    height, width = out.shape[2], out.shape[3]
    for n in range(out.shape[0]):
        for o in range(out.shape[1]):
            for r in range(height):
                source, target = product[n, o, r * pitch:r * pitch + width], out[n, o, r]
                if has_bias:  # (a zero bias would turn -0.0 into 0.0)
                    shift = bias[o]
                    for s in range(width):
                        target[s] = source[s] + shift
                else:
                    for s in range(width):
                        target[s] = source[s]


# Winograd F(2x2, 3x3)'s input and output transforms (kernels/numpy/conv.py's _Tiles), one
# pass each over a chunk of samples: numpy took about ten passes for each, short enough
# that two threads sharing the chunks waited on each other's interpreter lock (a 32-channel
# 16 x 16 input's gradient: 2.1 ms on one thread, the same on two). The arithmetic is
# numpy's, in the same order, so each real tile's values are the same bits.

@jit
def _input_rows(d0, d1, d2, d3):
    """B^T along one axis of a tile."""
    return d0 - d2, d1 + d2, d2 - d1, d1 - d3


@jit
def _store4(out, row, at, values):
    out[row, at] = values[0]
    out[row + 1, at] = values[1]
    out[row + 2, at] = values[2]
    out[row + 3, at] = values[3]


@jit
def winograd_input(x, top, left, padded, out):
    """B^T d B of every 4 x 4 tile of images x (n, C, H, W) padded by top and left (and by
    zeros below and right as far as the tiles read) into out (16, C n gh gw), point (a, b)
    in row 4 a + b: tile (i, j) of sample s and channel c at (c n + s) gh gw + i gw + j,
    reading rows 2 i to 2 i + 3 and columns 2 j to 2 j + 3 of the padded image, over the
    whole (gh, gw) grid (_Tiles': the image's tiles and a junk row and column). padded
    (2 gh + 2, 2 gw + 2), zeros: a work array whose border stays zero."""
    samples, channels, height, width = x.shape
    rows, columns = padded.shape[0] // 2 - 1, padded.shape[1] // 2 - 1
    per_sample = rows * columns
    for c in range(channels):
        for s in range(samples):
            image = x[s, c]
            for r in range(height):
                line, source = padded[top + r], image[r]
                for q in range(width):
                    line[left + q] = source[q]
            base = (c * samples + s) * per_sample
            for i in range(rows):
                d0, d1, d2, d3 = (padded[2 * i], padded[2 * i + 1], padded[2 * i + 2],
                                  padded[2 * i + 3])
                first = base + i * columns
                for j in range(columns):
                    k = 2 * j
                    a0, a1, a2, a3 = _input_rows(d0[k], d1[k], d2[k], d3[k])
                    b0, b1, b2, b3 = _input_rows(d0[k + 1], d1[k + 1], d2[k + 1], d3[k + 1])
                    c0, c1, c2, c3 = _input_rows(d0[k + 2], d1[k + 2], d2[k + 2], d3[k + 2])
                    e0, e1, e2, e3 = _input_rows(d0[k + 3], d1[k + 3], d2[k + 3], d3[k + 3])
                    at = first + j
                    _store4(out, 0, at, _input_rows(a0, b0, c0, e0))
                    _store4(out, 4, at, _input_rows(a1, b1, c1, e1))
                    _store4(out, 8, at, _input_rows(a2, b2, c2, e2))
                    _store4(out, 12, at, _input_rows(a3, b3, c3, e3))


@jit
def _output_rows(m0, m1, m2, m3):
    """A^T along one axis of a tile's points."""
    return (m0 + m1) + m2, (m1 - m2) - m3


@jit
def winograd_output(products, bias, has_bias, grid_height, grid_width, out):
    """out (n, O, H, W): each 2 x 2 output tile from A^T m A of its 16 points, products (16,
    O n gh gw) in winograd_input's layout, plus bias (O) when has_bias."""
    samples, channels, height, width = out.shape
    rows, columns = (height + 1) // 2, (width + 1) // 2
    per_sample = grid_height * grid_width
    for o in range(channels):
        for s in range(samples):
            plane = out[s, o]
            base = (o * samples + s) * per_sample
            for i in range(rows):
                first = base + i * grid_width
                for j in range(columns):
                    at = first + j
                    t00, t10 = _output_rows(products[0, at], products[4, at],
                                            products[8, at], products[12, at])
                    t01, t11 = _output_rows(products[1, at], products[5, at],
                                            products[9, at], products[13, at])
                    t02, t12 = _output_rows(products[2, at], products[6, at],
                                            products[10, at], products[14, at])
                    t03, t13 = _output_rows(products[3, at], products[7, at],
                                            products[11, at], products[15, at])
                    y00, y01 = _output_rows(t00, t01, t02, t03)
                    y10, y11 = _output_rows(t10, t11, t12, t13)
                    if has_bias:
                        y00 += bias[o]
                        y01 += bias[o]
                        y10 += bias[o]
                        y11 += bias[o]
                    r, q = 2 * i, 2 * j
                    plane[r, q] = y00
                    if q + 1 < width:
                        plane[r, q + 1] = y01
                    if r + 1 < height:
                        plane[r + 1, q] = y10
                        if q + 1 < width:
                            plane[r + 1, q + 1] = y11


@jit
def _gradient_rows(g0, g1):
    """A along one axis of a tile's 2 x 2 gradient."""
    return g0, g0 + g1, g0 - g1, -g1


@jit
def winograd_gradient(g, grid_height, grid_width, out):
    """The adjoint of winograd_output: A g A^T of every 2 x 2 tile of g (n, O, H, W) into
    out (16, O n gh gw) in winograd_input's layout, g zero beyond its edge (an odd size's
    overhang, the junk tiles)."""
    samples, channels, height, width = g.shape
    per_sample = grid_height * grid_width
    zero = g.dtype.type(0)
    for o in range(channels):
        for s in range(samples):
            plane = g[s, o]
            base = (o * samples + s) * per_sample
            for i in range(grid_height):
                r = 2 * i
                first = base + i * grid_width
                for j in range(grid_width):
                    q = 2 * j
                    g00 = plane[r, q] if r < height and q < width else zero
                    g01 = plane[r, q + 1] if r < height and q + 1 < width else zero
                    g10 = plane[r + 1, q] if r + 1 < height and q < width else zero
                    g11 = plane[r + 1, q + 1] if r + 1 < height and q + 1 < width else zero
                    a0, a1, a2, a3 = _gradient_rows(g00, g10)  # column 0, down the rows
                    b0, b1, b2, b3 = _gradient_rows(g01, g11)  # column 1
                    at = first + j
                    _store4(out, 0, at, _gradient_rows(a0, b0))
                    _store4(out, 4, at, _gradient_rows(a1, b1))
                    _store4(out, 8, at, _gradient_rows(a2, b2))
                    _store4(out, 12, at, _gradient_rows(a3, b3))


# A 3x3 stride-1 convolution (kernels/numpy/conv.py's _conv2d_3x3) straight from the padded
# images: each output row of four output channels gathers its nine taps from shifted runs of
# each input channel's image (tap (i, j) of output position q at q + i pitch + j), the four
# rows staying in the core's first cache over the input channels. Where the images are wide
# and the channels few, im2col's nine shifted copies and a GEMM of 16 rows cost more:
# 0.55-0.8x the column path's time from 32 x 32 images with 3 to 32 channels on each side.

@jit
def convolution_3x3(images, weights, pitch, out):
    """out[s, o, q] = sum over c, i, j of weights[o, c, 3 i + j] images[s, c, q + i pitch + j]
    for q < out.shape[2]: images (N, C, at least out.shape[2] + 2 pitch + 2), weights (O, C,
    9) with O a multiple of four."""
    length = out.shape[2]
    zero = out.dtype.type(0)
    for s in range(images.shape[0]):
        for o in range(0, out.shape[1], 4):
            p0, p1, p2, p3 = out[s, o], out[s, o + 1], out[s, o + 2], out[s, o + 3]
            for q in range(length):
                p0[q] = p1[q] = p2[q] = p3[q] = zero
            for c in range(images.shape[1]):
                image = images[s, c]
                # Views indexed by the loop's counter, so that numba drops its negative-index
                # tests.
                x0, x1, x2 = image[0:], image[1:], image[2:]
                x3, x4, x5 = image[pitch:], image[pitch + 1:], image[pitch + 2:]
                x6, x7, x8 = image[2 * pitch:], image[2 * pitch + 1:], image[2 * pitch + 2:]
                # the four rows' weights as scalars: loads from an array the loop stores
                # into could not leave the loop
                a, b = _nine(weights[o, c]), _nine(weights[o + 1, c])
                d, e = _nine(weights[o + 2, c]), _nine(weights[o + 3, c])
                for q in range(length):
                    v = (x0[q], x1[q], x2[q], x3[q], x4[q], x5[q], x6[q], x7[q], x8[q])
                    p0[q] = _taps(a, v, p0[q])
                    p1[q] = _taps(b, v, p1[q])
                    p2[q] = _taps(d, v, p2[q])
                    p3[q] = _taps(e, v, p3[q])


@jit
def _nine(k):
    return k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8]


@jit
def _taps(k, v, total):
    """total + the nine products k[t] v[t], in tap order."""
    total = multiply_add(k[0], v[0], total)
    total = multiply_add(k[1], v[1], total)
    total = multiply_add(k[2], v[2], total)
    total = multiply_add(k[3], v[3], total)
    total = multiply_add(k[4], v[4], total)
    total = multiply_add(k[5], v[5], total)
    total = multiply_add(k[6], v[6], total)
    total = multiply_add(k[7], v[7], total)
    return multiply_add(k[8], v[8], total)


# The weight gradient of a 3x3 or 5x5 stride-1 convolution (kernels/numpy/conv.py's
# _conv2d_weight_direct) as dot products per pair of (output, input) channels, over the
# padded images of a chunk of samples laid end to end: tap (i, j) of output position q reads
# the image at q + i pitch + j. The sums stay in vector registers (lanes_jit) over the whole
# chunk, where im2col wrote a shifted copy of each image per tap for a GEMM of 10 to 32 rows:
# 1.5-2x faster on the ResNet's and the tutorial CNN's shapes. A 3x3 kernel's nine taps take
# one pass (18 sums); a 5x5 kernel's 50 sums would not fit the registers, so it takes a pass
# per kernel row (10 sums).

@lanes_jit
def weight_gradient_3x3(images, gradients, pitch, out):
    """out[o, c, 3 i + j] += sum over q of gradients[o, q] images[c, q + i pitch + j]:
    images (C, length + 2 pitch + 2) and gradients (O, length), O even, zero wherever no
    output is (below and right of each image's outputs), out (O, C, 9)."""
    length = gradients.shape[1]
    zero = images.dtype.type(0)
    for c in range(images.shape[0]):
        image = images[c]
        # Views indexed by the loop's counter, so that numba drops its negative-index tests.
        x0, x1, x2 = image[0:], image[1:], image[2:]
        x3, x4, x5 = image[pitch:], image[pitch + 1:], image[pitch + 2:]
        x6, x7, x8 = image[2 * pitch:], image[2 * pitch + 1:], image[2 * pitch + 2:]
        for o in range(0, gradients.shape[0], 2):
            g, h = gradients[o], gradients[o + 1]
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = zero
            b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = b8 = zero
            for q in range(length):
                u, v = g[q], h[q]
                x = x0[q]
                a0, b0 = multiply_add(u, x, a0), multiply_add(v, x, b0)
                x = x1[q]
                a1, b1 = multiply_add(u, x, a1), multiply_add(v, x, b1)
                x = x2[q]
                a2, b2 = multiply_add(u, x, a2), multiply_add(v, x, b2)
                x = x3[q]
                a3, b3 = multiply_add(u, x, a3), multiply_add(v, x, b3)
                x = x4[q]
                a4, b4 = multiply_add(u, x, a4), multiply_add(v, x, b4)
                x = x5[q]
                a5, b5 = multiply_add(u, x, a5), multiply_add(v, x, b5)
                x = x6[q]
                a6, b6 = multiply_add(u, x, a6), multiply_add(v, x, b6)
                x = x7[q]
                a7, b7 = multiply_add(u, x, a7), multiply_add(v, x, b7)
                x = x8[q]
                a8, b8 = multiply_add(u, x, a8), multiply_add(v, x, b8)
            _add_sums(out[o, c], 0, (a0, a1, a2, a3, a4, a5, a6, a7, a8))
            _add_sums(out[o + 1, c], 0, (b0, b1, b2, b3, b4, b5, b6, b7, b8))


@jit
def _add_sums(target, start, sums):
    """target[start + t] += sums[t] for each of the tuple's sums."""
    for t in range(len(sums)):
        target[start + t] += sums[t]


@lanes_jit
def weight_gradient_5x5(images, gradients, pitch, out):
    """As weight_gradient_3x3 for a 5x5 kernel: out (O, C, 25), images (C, length + 4 pitch +
    4)."""
    length = gradients.shape[1]
    zero = images.dtype.type(0)
    for c in range(images.shape[0]):
        for i in range(5):
            row = images[c, i * pitch:]
            x0, x1, x2, x3, x4 = row[0:], row[1:], row[2:], row[3:], row[4:]
            for o in range(0, gradients.shape[0], 2):
                g, h = gradients[o], gradients[o + 1]
                a0 = a1 = a2 = a3 = a4 = zero
                b0 = b1 = b2 = b3 = b4 = zero
                for q in range(length):
                    u, v = g[q], h[q]
                    x = x0[q]
                    a0, b0 = multiply_add(u, x, a0), multiply_add(v, x, b0)
                    x = x1[q]
                    a1, b1 = multiply_add(u, x, a1), multiply_add(v, x, b1)
                    x = x2[q]
                    a2, b2 = multiply_add(u, x, a2), multiply_add(v, x, b2)
                    x = x3[q]
                    a3, b3 = multiply_add(u, x, a3), multiply_add(v, x, b3)
                    x = x4[q]
                    a4, b4 = multiply_add(u, x, a4), multiply_add(v, x, b4)
                _add_sums(out[o, c], 5 * i, (a0, a1, a2, a3, a4))
                _add_sums(out[o + 1, c], 5 * i, (b0, b1, b2, b3, b4))


# Max pooling (kernels/numpy/conv.py): forward finds each window's maximum and which tap
# holds it in one pass, and backward sends each window's gradient to that tap. numpy took a
# strided pass per tap for the maxima and as many again to find the winners (in backward):
# 0.43 ms for the tutorial CNN's first pool, (64, 10, 24, 24) float32, where the 2x2 loop
# below takes 0.07 ms; a 3x3, stride-2 pool of (32, 64, 32, 32), 7.7 ms against 6.0.
# The general loop goes tap by tap along each output row, as numpy did, in one pass; the
# common disjoint 2x2 pool keeps its four taps in registers. A loop over windows, their
# taps inside, stayed scalar and branched on the data (11 ms for the 3x3 pool).
# Winners follow torch's CPU kernel: the first in-bounds tap, replaced by each later tap
# that is greater or nan, so a window's winner is its first maximum or its last nan.

@jit
def pool_max(x, kernel_size, stride, padding, dilation, lowest, out, index):
    """out[n, c, r, s], the maximum of window (r, s) of x[n, c], and index[n, c, r, s], its
    winning tap (i kw + j); the window's taps outside the image are skipped. A window with no
    tap inside (a dilated kernel over a small padded image) gets `lowest` (-inf for floats)
    and tap 0, which lies outside: its gradient goes nowhere."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    height, width = x.shape[2], x.shape[3]
    out_h, out_w = out.shape[2], out.shape[3]
    if _two_by_two(kernel_size, stride, padding, dilation, out_h, out_w, height, width):
        _pool_max_2x2(x, out, index)
        return
    # Tap column j lies inside the image for the windows first[j] <= s < stop[j].
    first = np.empty(kw, np.int64)
    stop = np.empty(kw, np.int64)
    for j in range(kw):
        offset = j * dw - pw
        first[j] = (sw - 1 - offset) // sw if offset < 0 else 0
        stop[j] = max(first[j], min(out_w, (width - 1 - offset) // sw + 1))
    # Each window's first tap column inside the image (-1: none), where its maximum starts.
    first_tap = np.empty(out_w, np.int64)
    for s in range(out_w):
        first_tap[s] = _first_inside(s * sw - pw, dw, kw, width)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            plane, maxima, winners = x[n, c], out[n, c], index[n, c]
            for r in range(out_h):
                top = r * sh - ph
                i0 = _first_inside(top, dh, kh, height)
                best, won = maxima[r], winners[r]
                for s in range(out_w):
                    if i0 < 0 or first_tap[s] < 0:
                        best[s] = lowest
                        won[s] = 0
                    else:
                        best[s] = plane[top + i0 * dh, s * sw - pw + first_tap[s] * dw]
                        won[s] = i0 * kw + first_tap[s]
                if i0 < 0:
                    continue
                for i in range(i0, kh):
                    y = top + i * dh
                    if y >= height:
                        break
                    row = plane[y]
                    for j in range(kw):
                        lo, hi = first[j], stop[j]
                        if lo == hi:
                            continue
                        start = lo * sw + j * dw - pw
                        # Views indexed by the loop's counter (see fold_add), loaded and
                        # stored whole: a conditional store left the loop branching on
                        # random data (3x slower).
                        values = row[start:start + (hi - lo - 1) * sw + 1:sw]
                        maxima_run, winners_run = best[lo:hi], won[lo:hi]
                        tap = i * kw + j
                        for q in range(hi - lo):
                            v, b, w = values[q], maxima_run[q], winners_run[q]
                            take = (v > b) | (v != v)
                            maxima_run[q] = v if take else b
                            winners_run[q] = tap if take else w


@jit
def _two_by_two(kernel_size, stride, padding, dilation, out_h, out_w, height, width):
    """Disjoint 2x2 windows inside the image: the loops of their own apply."""
    return (kernel_size[0] == kernel_size[1] == stride[0] == stride[1] == 2
            and padding[0] == padding[1] == 0 and dilation[0] == dilation[1] == 1
            and 2 * out_h <= height and 2 * out_w <= width)


@jit
def _pool_max_2x2(x, out, index):
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            plane, maxima, winners = x[n, c], out[n, c], index[n, c]
            for r in range(out.shape[2]):
                upper, lower = plane[2 * r], plane[2 * r + 1]
                best, won = maxima[r], winners[r]
                for s in range(out.shape[3]):
                    b, w = upper[2 * s], 0
                    v = upper[2 * s + 1]
                    take = (v > b) | (v != v)
                    b, w = (v, 1) if take else (b, w)
                    v = lower[2 * s]
                    take = (v > b) | (v != v)
                    b, w = (v, 2) if take else (b, w)
                    v = lower[2 * s + 1]
                    take = (v > b) | (v != v)
                    b, w = (v, 3) if take else (b, w)
                    best[s] = b
                    won[s] = w


@jit
def pool_scatter(g, index, kernel_size, stride, padding, dilation, out):
    """out[n, c] (the input's size) = the sum of g[n, c, r, s] over the windows (r, s) whose
    winning tap index[n, c, r, s] is that cell, added window after window in order (torch's
    order, where windows overlap); a tap outside the image takes nothing. out need not be
    zeroed first: each image is zeroed, then takes one scalar add per window: a vectorised loop writing every cell (disjoint 2x2
    windows, the gradient or zero by the winner) branched on the winners, 4x slower."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    height, width = out.shape[2], out.shape[3]
    # Each tap's place relative to its window's corner, looked up: a division per window by
    # the kernel's width took most of the pass.
    tap_rows = np.empty(kh * kw, np.int64)
    tap_cols = np.empty(kh * kw, np.int64)
    for i in range(kh):
        for j in range(kw):
            tap_rows[i * kw + j] = i * dh - ph
            tap_cols[i * kw + j] = j * dw - pw
    offsets = tap_rows * width + tap_cols  # in the flat image
    # Only a geometry with a window that has no tap inside the image (pool_max) has winners
    # outside it; the others skip the test per window (a third of the pass).
    outside = False
    for r in range(g.shape[2]):
        outside |= _first_inside(r * sh - ph, dh, kh, height) < 0
    for s in range(g.shape[3]):
        outside |= _first_inside(s * sw - pw, dw, kw, width) < 0
    zero = out.dtype.type(0)
    for n in range(g.shape[0]):
        for c in range(g.shape[1]):
            image = out[n, c].reshape(height * width)
            for k in range(height * width):
                image[k] = zero
            grad, winners = g[n, c], index[n, c]
            for r in range(g.shape[2]):
                values, won = grad[r], winners[r]
                corner = r * sh * width
                for s in range(g.shape[3]):
                    tap = won[s]
                    if outside and not (0 <= r * sh + tap_rows[tap] < height
                                        and 0 <= s * sw + tap_cols[tap] < width):
                        continue
                    image[corner + s * sw + offsets[tap]] += values[s]


@jit
def _first_inside(start, step, taps, size):
    """The first of `taps` places start, start + step, ... that lies in [0, size) (its
    number), or -1 where none does."""
    for t in range(taps):
        if 0 <= start + t * step < size:
            return t
    return -1
