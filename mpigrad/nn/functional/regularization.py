"""Regularisation: dropout, of elements and of whole channels."""
import warnings

import numpy as np

from ... import random
from ...tensor import Tensor
from .. import _checks


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes each element with probability p (mask from mpigrad's default generator) and
    scales the rest by 1/(1-p), so the expectation is unchanged; the identity when not
    training."""
    _checks.probability("dropout probability", p)
    return _masked_dropout(input, p, training, inplace, input.shape)


def _masked_dropout(input, p, training, inplace, mask_shape):
    """Dropout with one keep/drop draw per element of `mask_shape`, broadcast over input."""
    if not training or p == 0:
        return input
    keep = random.uniform_array(mask_shape, 0.0, 1.0, np.float64) >= p
    scale = Tensor.wrap(keep.astype(input.dtype) / (1 - p) if p < 1
                        else np.zeros(mask_shape, input.dtype))
    return input.mul_(scale) if inplace else input * scale


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
