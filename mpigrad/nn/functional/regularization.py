"""Regularisation: dropout, of elements and of whole channels."""
import warnings

import numpy as np

from ... import dtypes, ops, random
from .. import _checks


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes each element with probability p and scales the rest by 1/(1-p), so the
    expectation is unchanged; the identity when not training. One pass (the `dropout` op's
    kernel): the mask is drawn from a seed taken from mpigrad's default generator, so
    `manual_seed` decides it, and backward draws it again rather than keeping it."""
    _checks.probability("dropout probability", p)
    return _masked_dropout(input, p, training, inplace, input.shape)


def _masked_dropout(input, p, training, inplace, mask_shape):
    """Dropout with one keep/drop draw per element of `mask_shape`, broadcast over input: its
    leading dimensions, then ones (whole channels), so each draw covers a run of `span`
    consecutive elements."""
    if not training or p == 0:
        return input
    if not dtypes.is_floating_point(input.dtype):
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{dtypes.torch_name(input.dtype)}")
    seed = int(random.integers_array(0, 2 ** 63, (), np.int64))
    drawn = int(np.prod(mask_shape, dtype=np.int64))
    params = dict(p=float(p), seed=seed, span=input.numel() // drawn if drawn else 1)
    return ops.inplace(ops.dropout, input, **params) if inplace else ops.dropout(input, **params)


def _feature_dropout(input, p, training, inplace):
    # One draw per (sample, channel): whole feature maps are kept or dropped.
    return _masked_dropout(input, p, training, inplace,
                           input.shape[:2] + (1,) * (input.ndim - 2))


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, L) or (C, L) input with probability p."""
    _checks.probability("dropout probability", p)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           "input. Note that dropout1d exists to provide channel-wise dropout on "
                           "inputs with 1 spatial dimension, a channel dimension, and an optional "
                           "batch dimension (i.e. 2D or 3D inputs).")
    if input.ndim == 3:
        return _feature_dropout(input, p, training, inplace)
    # Unbatched: the channels are the first dimension.
    return _masked_dropout(input, p, training, inplace, (input.shape[0], 1))


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) input with probability p. As in torch, 3-d input
    is read as (N, C, L) with a warning, and other ranks are accepted with a warning."""
    _checks.probability("dropout probability", p)
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is "
                      "deprecated and will result in an error in a future release. To retain the "
                      "behavior and silence this warning, please use dropout instead. Note that "
                      "dropout2d exists to provide channel-wise dropout on inputs with 2 spatial "
                      "dimensions, a channel dimension, and an optional batch dimension (i.e. 3D "
                      "or 4D inputs).", stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
                      "1D dropout behavior is desired - input is interpreted as shape (N, C, L), "
                      "where C is the channel dim. This behavior will change in a future release "
                      "to interpret the input as one without a batch dimension, i.e. shape "
                      "(C, H, W). To maintain the 1D channel-wise dropout behavior, please switch "
                      "to using dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training, inplace)
