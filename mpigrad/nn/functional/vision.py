"""Image resampling: pixel_shuffle and pixel_unshuffle, and interpolate."""
import numbers

import numpy as np

from ... import ops
from ...dtypes import is_floating_point
from ...tensor import Tensor
from .pooling import adaptive_avg_pool1d, adaptive_avg_pool2d


def _check_shuffle_input(what, input):
    if input.ndim < 3:
        raise RuntimeError(f"{what} expects input to have at least 3 dimensions, but got input "
                           f"with {input.ndim} dimension(s)")


def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r): each r x r block of output pixels comes from r^2
    consecutive channels."""
    _check_shuffle_input("pixel_shuffle", input)
    r = upscale_factor
    *batch, channels, h, w = input.shape
    if channels % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)="
                           f"{channels} is not divisible by {r * r}")
    k = len(batch)
    blocks = input.reshape(*batch, channels // (r * r), r, r, h, w)
    order = tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2)
    return blocks.permute(*order).reshape(*batch, channels // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """The inverse of pixel_shuffle: (*, C, H r, W r) -> (*, C r^2, H, W)."""
    _check_shuffle_input("pixel_unshuffle", input)
    r = downscale_factor
    *batch, channels, h, w = input.shape
    for axis, name, size in ((-2, "height", h), (-1, "width", w)):
        if size % r:
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by "
                               f"downscale_factor, but input.size({axis})={size} is not "
                               f"divisible by {r}")
    k = len(batch)
    blocks = input.reshape(*batch, channels, h // r, r, w // r, r)
    order = tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3)
    return blocks.permute(*order).reshape(*batch, channels * r * r, h // r, w // r)


_LINEAR_MODES = {"linear": 3, "bilinear": 4, "trilinear": 5}


def _nearest_positions(size, out_size, scale, exact):
    """torch's nearest source index along one axis, computed in single precision as its
    kernel does (so a product that float rounds just below an integer floors as torch's)."""
    step = np.float32(1.0 / scale) if scale else np.float32(size) / np.float32(out_size)
    positions = np.arange(out_size, dtype=np.float32)
    if exact:
        positions += np.float32(0.5)
    return np.minimum(np.floor(positions * step).astype(np.int64), size - 1)


def _linear_positions(size, out_size, scale, align_corners, dtype):
    """torch's two source indices and the second one's weight along one axis."""
    if align_corners:
        step = (size - 1) / (out_size - 1) if out_size > 1 else 0.0
        source = np.arange(out_size, dtype=dtype) * dtype.type(step)
    else:
        step = dtype.type(1.0 / scale) if scale else dtype.type(size) / dtype.type(out_size)
        source = np.maximum((np.arange(out_size, dtype=dtype) + dtype.type(0.5)) * step
                            - dtype.type(0.5), 0)
    first = source.astype(np.int64)
    return first, np.minimum(first + 1, size - 1), source - first


def _resampling_sizes(input, size, scale_factor, recompute_scale_factor):
    """The output size, and the scales the kernels use (None: in / out), per spatial axis."""
    dims = input.ndim - 2
    spatial = list(input.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None
                         else "either size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = [size] * dims if isinstance(size, numbers.Integral) else list(size)
        if len(sizes) != dims:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, "
                             f"but got input with spatial dimensions of {spatial} and output "
                             f"size of {size}. Please provide input tensor in (N, C, d1, d2, "
                             f"...,dK) format and output size in (o1, o2, ...,oK) format.")
        return [int(s) for s in sizes], [None] * dims
    scales = [scale_factor] * dims if isinstance(scale_factor, numbers.Number) \
        else list(scale_factor)
    if len(scales) != dims:
        raise ValueError(f"Input and scale_factor must have the same number of spatial "
                         f"dimensions, but got input with spatial dimensions of {spatial} and "
                         f"scale_factor of shape {scale_factor}. Please provide input tensor in "
                         f"(N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) "
                         f"format.")
    sizes = [int(np.floor(float(n * s))) for n, s in zip(spatial, scales)]
    return sizes, [None] * dims if recompute_scale_factor else [float(s) for s in scales]


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resamples the spatial dimensions of (N, C, *spatial) input to `size`, or by
    `scale_factor`: 'nearest' and 'nearest-exact' copy a source pixel, 'linear', 'bilinear'
    and 'trilinear' mix the two nearest along each axis (pixel centres aligned, or corners
    with align_corners), 'area' averages torch's adaptive bins. Each axis is one gather (and
    a weighted sum), so gradients and tangents come from the gathers'."""
    modes = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")
    if align_corners is not None and mode not in _LINEAR_MODES and mode != "bicubic":
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if mode not in modes or input.ndim not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{input.ndim}D) for the modes: nearest | linear | bilinear | "
                                  f"bicubic | trilinear | lanczos | area | nearest-exact (got "
                                  f"{mode})")
    if mode in _LINEAR_MODES and input.ndim != _LINEAR_MODES[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{_LINEAR_MODES[mode]}D input")
    if mode == "bicubic" or antialias:
        raise NotImplementedError("interpolate: bicubic mode and antialias are not supported")
    sizes, scales = _resampling_sizes(input, size, scale_factor, recompute_scale_factor)
    if min(sizes) <= 0:
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"{tuple(input.shape[2:])} output {tuple(sizes)}")
    if mode == "area":
        if input.ndim == 5:
            raise NotImplementedError("interpolate: mode 'area' of 5-D input is not supported")
        pool = adaptive_avg_pool1d if input.ndim == 3 else adaptive_avg_pool2d
        return pool(input, sizes if input.ndim == 4 else sizes[0])
    if mode == "bilinear" and is_floating_point(input.dtype):
        positions = tuple(_linear_positions(n, m, scale, bool(align_corners),
                                            np.dtype(input.dtype))
                          for n, m, scale in zip(input.shape[2:], sizes, scales))
        return ops.upsample_bilinear2d(input, positions=positions)
    out = input
    # The last axis first: torch mixes along it innermost, and its gathers (the slow ones,
    # element by element) then run on the smaller array when upsampling.
    axes = list(enumerate(zip(input.shape[2:], sizes, scales), start=2))
    for axis, (n, m, scale) in reversed(axes):
        before = (slice(None),) * axis
        if mode.startswith("nearest"):
            out = out[before + (_nearest_positions(n, m, scale, mode == "nearest-exact"),)]
            continue
        first, second, weight = _linear_positions(n, m, scale, bool(align_corners),
                                                  np.dtype(input.dtype))
        weight = Tensor(weight.reshape((m,) + (1,) * (input.ndim - 1 - axis)))
        out = out[before + (first,)] * (1 - weight) + out[before + (second,)] * weight
    return out
