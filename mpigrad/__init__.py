"""mpigrad: MPI-native data-parallel training with a PyTorch-style autograd.

The public names mirror torch's: tensors and their factories here, `mpigrad.autograd`,
`mpigrad.nn`, `mpigrad.optim`, `mpigrad.data` (torch.utils.data's role) and
`mpigrad.distributed`.
"""
from . import _allocator  # noqa: F401  (first: tunes malloc before any large array)
from . import _blas_wait  # noqa: F401  (before numpy loads its BLAS, which reads it once)
from .dtypes import (float16, half, bfloat16, float32, float, float64, double, int8,  # noqa: F401
                     uint8, int16, short, int32, int, int64, long, bool, complex64, cfloat,
                     complex128, cdouble, get_default_dtype, set_default_dtype,
                     is_floating_point, finfo, iinfo, layout, strided, sparse_coo,
                     promote_types, result_type)
from .tensor import Tensor, is_tensor, numel  # noqa: F401
from ._tensor_str import set_printoptions  # noqa: F401
from .creation import (tensor, as_tensor, from_numpy, zeros, ones, empty, full,  # noqa: F401
                       zeros_like, ones_like, empty_like, full_like, randn_like, rand_like,
                       randint_like, arange, linspace, eye, randn, rand, randint, randperm,
                       multinomial, FloatTensor, DoubleTensor, HalfTensor, LongTensor,
                       IntTensor, ShortTensor, CharTensor, ByteTensor, BoolTensor)
from .random import (Generator, manual_seed, seed, initial_seed, get_rng_state,  # noqa: F401
                     set_rng_state, default_generator)
from .autograd import (no_grad, enable_grad, set_grad_enabled, is_grad_enabled,  # noqa: F401
                       inference_mode, is_inference_mode_enabled, is_anomaly_enabled)
from .ops import (add, sub, mul, div, neg, pow, matmul, exp, log, sqrt, sin, cos, tanh,  # noqa: F401
                  abs, sign, sigmoid, relu, erf, clamp, maximum, minimum, where, sum, mean,
                  var, std, norm, amax, amin, max, min, argmax, argmin, softmax, log_softmax,
                  logsumexp, take_along_dim, reshape, flatten, permute, transpose, squeeze,
                  unsqueeze, cat, concat, stack, split, chunk, eq, ne, lt, le, gt, ge,
                  isnan, isfinite, clone, masked_fill, floor, ceil, round, cumsum, prod, sort,
                  topk, index_select, gather, unbind, tril, triu, einsum, bmm, baddbmm, addmm,
                  outer, ger, scatter, scatter_add, index_add, repeat_interleave, roll, flip,
                  rsqrt, lerp, nan_to_num, broadcast_to, meshgrid, allclose, remainder, fmod,
                  isclose, equal, argsort, count_nonzero, tile, movedim, swapaxes, unflatten,
                  masked_select, dot, mv, nonzero, argwhere, aminmax, nansum, nanmean,
                  tensor_split, hsplit, vsplit, take, trace, logical_and, logical_or,
                  logical_not)
from .ops import safe_softmax as _safe_softmax  # noqa: F401  (torch._safe_softmax)
from .ops import rnn_tanh_cell, rnn_relu_cell, gru_cell, lstm_cell  # noqa: F401
from .serialization import save, load  # noqa: F401
from .kernels.threads import (set_num_threads, get_num_threads,  # noqa: F401
                              set_num_interop_threads, get_num_interop_threads)
from .sparse import sparse_coo_tensor  # noqa: F401
from .device import device  # noqa: F401
from . import autograd, futures, ops, utils, nn, optim, data, func  # noqa: F401
from . import accelerator, backends, cuda, hub, multiprocessing, onnx, profiler  # noqa: F401
from . import serialization, sparse  # noqa: F401
from . import amp, cpu, _dynamo  # noqa: F401
from ._compile import compile  # noqa: F401
from ._deterministic import (use_deterministic_algorithms,  # noqa: F401
                             are_deterministic_algorithms_enabled,
                             is_deterministic_algorithms_warn_only_enabled,
                             set_deterministic_debug_mode, get_deterministic_debug_mode)
from .backends.cuda import (set_float32_matmul_precision,  # noqa: F401
                            get_float32_matmul_precision)
from .amp.autocast_mode import (autocast, is_autocast_enabled, get_autocast_dtype,  # noqa: F401
                                set_autocast_dtype, is_autocast_cpu_enabled,
                                get_autocast_cpu_dtype)
# mpigrad.distributed is imported explicitly: under an MPI launcher or torchrun, importing it
# initialises MPI.

clip = clamp
moveaxis = movedim
swapdims = swapaxes
