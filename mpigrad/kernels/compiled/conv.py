"""col2im: columns added back onto the images their windows came from (kernels/numpy/conv.py's
folds: the input's gradient of a strided convolution, F.fold). numpy did it as one strided
add per tap, whose inner loops run along a window row of a few elements."""
from ._math import jit


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
