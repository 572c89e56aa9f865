"""torch.nn.functional's names and semantics, composed from mpigrad's differentiable ops.

Everything here is built from op rules that are themselves differentiable, so second
derivatives (double backward) work without extra rules. Conventions follow torch: images
are (N, C, H, W) (or unbatched (C, H, W)), class scores (N, C, d1, ...) with the class
dimension second.

The functions live in one module per kind, as the op rules do in ops/: linalg (linear,
bilinear), conv (convolutions, fold, unfold), pooling, activations, regularization (dropout),
normalization, sparse (embedding lookups), distance, vision (pixel shuffles, interpolate),
attention and loss. Their argument errors follow one rule, in nn/_checks.py: torch's
exception type for each kind of mistake.
"""
from ...ops.shape import pad
from .linalg import linear, bilinear
from .conv import unfold, fold, conv2d, conv1d, conv_transpose2d, conv_transpose1d
from .pooling import (max_pool2d, avg_pool2d, max_pool1d, avg_pool1d, adaptive_max_pool2d,
                      adaptive_max_pool1d, adaptive_avg_pool1d, adaptive_avg_pool2d)
from .activations import (relu, leaky_relu, gelu, silu, tanh, sigmoid, softmax, log_softmax,
                          hardtanh, relu6, elu, selu, celu, softplus, logsigmoid, hardsigmoid,
                          hardswish, threshold, softsign, mish, prelu, glu)
from .regularization import dropout, dropout1d, dropout2d
from .normalization import layer_norm, group_norm, batch_norm, instance_norm, rms_norm, normalize
from .sparse import embedding, one_hot, embedding_bag
from .distance import pairwise_distance, cosine_similarity
from .vision import pixel_shuffle, pixel_unshuffle, interpolate
from .attention import scaled_dot_product_attention, multi_head_attention_forward
from .loss import (l1_loss, mse_loss, smooth_l1_loss, huber_loss, binary_cross_entropy,
                   binary_cross_entropy_with_logits, kl_div, cosine_embedding_loss,
                   margin_ranking_loss, triplet_margin_loss, triplet_margin_with_distance_loss,
                   gaussian_nll_loss, poisson_nll_loss, soft_margin_loss, hinge_embedding_loss,
                   multilabel_soft_margin_loss, multi_margin_loss, multilabel_margin_loss,
                   ctc_loss, nll_loss, cross_entropy)

__all__ = ["pad", "linear", "bilinear", "unfold", "fold", "conv2d", "conv1d", "conv_transpose2d",
           "conv_transpose1d", "max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool1d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d", "relu", "leaky_relu", "gelu", "silu", "tanh", "sigmoid",
           "softmax", "log_softmax", "hardtanh", "relu6", "elu", "selu", "celu", "softplus",
           "logsigmoid", "hardsigmoid", "hardswish", "threshold", "softsign", "mish", "prelu",
           "glu", "dropout", "dropout1d", "dropout2d", "layer_norm", "group_norm", "batch_norm",
           "instance_norm", "rms_norm", "normalize", "embedding", "one_hot", "embedding_bag",
           "pairwise_distance", "cosine_similarity", "pixel_shuffle", "pixel_unshuffle",
           "interpolate", "scaled_dot_product_attention", "multi_head_attention_forward",
           "l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss",
           "margin_ranking_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss",
           "gaussian_nll_loss", "poisson_nll_loss", "soft_margin_loss", "hinge_embedding_loss",
           "multilabel_soft_margin_loss", "multi_margin_loss", "multilabel_margin_loss",
           "ctc_loss", "nll_loss", "cross_entropy"]
