"""Every differentiable op against finite differences (float64), first and second order."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad.autograd import Function, gradcheck, gradgradcheck
from mpigrad.autograd.gradcheck import GradcheckError
from mpigrad.autograd.graph import reachable
from mpigrad.ops.core import REGISTRY, OpNode

F = mg.ops


def _positive(shape, rng):
    return rng.uniform(0.5, 2.0, shape)


def _spread(shape, rng):
    # Distinct values, away from kinks, so max/relu/abs/clamp are differentiable where sampled.
    n = int(np.prod(shape))
    values = rng.permutation(n).reshape(shape) / n * 4 - 2 + 0.01
    return values + rng.uniform(-0.004, 0.004, shape)


def _normal(shape, rng):
    return rng.standard_normal(shape)


def _setitem(a, b):
    out = a * 1.0
    out[1:3, [0, 2]] = b
    return out


# (name, function, [(shape, sampler), ...]) -- shapes include broadcasting pairs. Every op in
# the registry must be reached by some case (test_every_op_has_a_case).
CASES = [
    ("add", lambda a, b: a + b, [((3, 4), _normal), ((4,), _normal)]),
    ("add_scalar", lambda a: 2.5 + a, [((2, 3), _normal)]),
    ("sub", lambda a, b: a - b, [((2, 1, 4), _normal), ((3, 1), _normal)]),
    ("rsub", lambda a: 1.0 - a, [((3,), _normal)]),
    ("mul", lambda a, b: a * b, [((3, 4), _normal), ((3, 1), _normal)]),
    ("div", lambda a, b: a / b, [((3, 4), _normal), ((4,), _positive)]),
    ("rdiv", lambda a: 2.0 / a, [((3,), _positive)]),
    ("leaky_relu_inplace", lambda a: mg.nn.LeakyReLU(0.2, inplace=True)(a * 1.5),
     [((3, 4), _spread)]),
    ("leaky_relu", lambda a: mg.nn.functional.leaky_relu(a, -0.3), [((3, 4), _spread)]),
    # Finite differences stay off the jumps: the quotients are away from integers here.
    ("remainder", lambda a, b: a % b, [((3, 4), _normal), ((4,), _positive)]),
    ("fmod", lambda a, b: mg.fmod(a, -b), [((3, 4), _normal), ((4,), _positive)]),
    ("pow_scalar", lambda a: a ** 3, [((3, 2), _normal)]),
    ("pow_tensor", lambda a, b: a ** b, [((3, 2), _positive), ((2,), _normal)]),
    ("rpow", lambda a: 2.0 ** a, [((4,), _normal)]),
    ("neg", lambda a: -a, [((2, 3), _normal)]),
    ("matmul_2d", lambda a, b: a @ b, [((3, 4), _normal), ((4, 2), _normal)]),
    ("matmul_batched_broadcast", lambda a, b: a @ b, [((2, 3, 4), _normal), ((4, 5), _normal)]),
    ("matmul_vec", lambda a, b: a @ b, [((3, 4), _normal), ((4,), _normal)]),
    ("matmul_vec_left", lambda a, b: a @ b, [((4,), _normal), ((2, 4, 3), _normal)]),
    ("dot", lambda a, b: a @ b, [((5,), _normal), ((5,), _normal)]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [((2, 3, 4), _normal), ((5, 4), _normal),
                                                  ((5,), _normal)]),
    ("exp", lambda a: a.exp(), [((3, 4), _normal)]),
    ("log", lambda a: a.log(), [((3, 4), _positive)]),
    ("sqrt", lambda a: a.sqrt(), [((3, 4), _positive)]),
    ("abs", lambda a: a.abs(), [((3, 4), _spread)]),
    ("tanh", lambda a: a.tanh(), [((3, 4), _normal)]),
    ("sigmoid", lambda a: a.sigmoid(), [((3, 4), _normal)]),
    ("relu", lambda a: a.relu(), [((3, 4), _spread)]),
    ("gelu", lambda a: F.gelu(a), [((3, 4), _normal)]),
    ("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [((3, 4), _normal)]),
    ("silu", lambda a: mg.nn.functional.silu(a), [((3, 4), _normal)]),
    # the fused ops of issue 31 (their rules serve create_graph=True and tangents)
    ("cross_entropy", lambda a: mg.nn.functional.cross_entropy(
        a, mg.tensor([0, 3, 1]), weight=mg.tensor([0.5, 1.5, 1.0, 2.0], dtype=a.dtype),
        ignore_index=1, label_smoothing=0.2), [((3, 4), _normal)]),
    ("mse_loss_mean", lambda a, b: mg.nn.functional.mse_loss(a, b),
     [((3, 4), _normal), ((3, 4), _normal)]),
    ("mse_loss_sum", lambda a, b: mg.nn.functional.mse_loss(a, b, reduction="sum"),
     [((2, 3), _normal), ((2, 3), _normal)]),
    ("mse_loss_none", lambda a, b: mg.nn.functional.mse_loss(a, b, reduction="none"),
     [((5,), _normal), ((5,), _normal)]),
    ("layer_norm", lambda a, w, b: mg.nn.functional.layer_norm(a, (4,), w, b),
     [((3, 4), _normal), ((4,), _normal), ((4,), _normal)]),
    ("rms_norm", lambda a, w: mg.nn.functional.rms_norm(a, (2, 4), w, eps=1e-6),
     [((3, 2, 4), _normal), ((2, 4), _normal)]),
    ("dropout", lambda a: mg.ops.dropout(a, p=0.3, seed=5, span=2), [((3, 4), _normal)]),
    ("batch_norm", lambda a, w, b: mg.nn.functional.batch_norm(a, None, None, w, b,
                                                               training=True),
     [((3, 2, 5), _normal), ((2,), _normal), ((2,), _normal)]),
    ("sin_cos", lambda a: a.sin() * a.cos(), [((5,), _normal)]),
    ("clamp", lambda a: a.clamp(-0.5, 0.7), [((3, 4), _spread)]),
    ("clamp_min", lambda a: a.clamp(min=0.1), [((3, 4), _spread)]),
    ("maximum", lambda a, b: mg.maximum(a, b), [((3, 4), _spread), ((4,), _spread)]),
    ("minimum", lambda a, b: mg.minimum(a, b), [((3, 4), _spread), ((3, 1), _spread)]),
    ("where", lambda a, b: mg.where(a > 0, a, b), [((3, 4), _spread), ((4,), _normal)]),
    ("masked_fill", lambda a: a.masked_fill(a > 0.3, 2.0), [((3, 4), _spread)]),
    ("sum_all", lambda a: a.sum(), [((3, 4), _normal)]),
    ("sum_dim", lambda a: a.sum(1), [((3, 4, 2), _normal)]),
    ("sum_dims_keepdim", lambda a: a.sum((0, 2), keepdim=True), [((3, 4, 2), _normal)]),
    ("mean_dim", lambda a: a.mean(-1), [((3, 4), _normal)]),
    ("mean_all", lambda a: a.mean(), [((3, 4), _normal)]),
    ("var", lambda a: a.var(1), [((3, 5), _normal)]),
    ("var_biased_keepdim", lambda a: a.var(0, unbiased=False, keepdim=True), [((4, 3), _normal)]),
    ("std", lambda a: a.std(), [((3, 4), _normal)]),
    ("norm", lambda a: a.norm(dim=1), [((3, 4), _normal)]),
    ("max_all", lambda a: a.max(), [((3, 4), _spread)]),
    ("min_all", lambda a: a.min(), [((3, 4), _spread)]),
    ("max_dim", lambda a: a.max(1).values, [((3, 4), _spread)]),
    ("min_dim_keepdim", lambda a: a.min(0, keepdim=True).values, [((3, 4), _spread)]),
    ("amax", lambda a: a.amax((0, 1)), [((3, 4, 2), _spread)]),
    ("softmax", lambda a: a.softmax(1), [((3, 4), _normal)]),
    ("log_softmax", lambda a: a.log_softmax(0), [((3, 4), _normal)]),
    ("logsumexp", lambda a: a.logsumexp(1), [((3, 4), _normal)]),
    ("logsumexp_keepdim", lambda a: a.logsumexp(0, keepdim=True), [((3, 4), _normal)]),
    ("reshape", lambda a: a.reshape(6, 2) * 1.0, [((3, 4), _normal)]),
    ("view", lambda a: a.view(-1), [((3, 4), _normal)]),
    ("flatten", lambda a: a.flatten(1), [((2, 3, 4), _normal)]),
    ("transpose", lambda a: a.transpose(0, 2), [((2, 3, 4), _normal)]),
    ("T", lambda a: a.T, [((2, 3), _normal)]),
    ("permute", lambda a: a.permute(2, 0, 1), [((2, 3, 4), _normal)]),
    ("squeeze", lambda a: a.squeeze(1), [((3, 1, 4), _normal)]),
    ("unsqueeze", lambda a: a.unsqueeze(-1), [((3, 4), _normal)]),
    ("expand", lambda a: a.expand(2, 3, 4), [((3, 1), _normal)]),
    ("index_basic", lambda a: a[1:, ::2], [((4, 5), _normal)]),
    ("index_int", lambda a: a[2], [((4, 5), _normal)]),
    ("index_array_repeated", lambda a: a[[0, 2, 0, 3]], [((4, 5), _normal)]),
    ("index_mixed", lambda a: a[:, [1, 1, 4]], [((4, 5), _normal)]),
    ("index_bool", lambda a: a[a > 0], [((4, 5), _spread)]),
    ("index_tensor", lambda a: a[mg.tensor([3, 0, 3])], [((4, 2), _normal)]),
    ("take_along_dim", lambda a: mg.take_along_dim(a, mg.tensor([[0, 2, 0], [1, 1, 3]]), 1),
     [((2, 4), _normal)]),
    ("cat", lambda a, b: mg.cat([a, b, a], dim=1), [((2, 3), _normal), ((2, 1), _normal)]),
    ("stack", lambda a, b: mg.stack([a, b], dim=1), [((2, 3), _normal), ((2, 3), _normal)]),
    ("split", lambda a: a.split([1, 3], dim=1)[1] * a.split(2)[0].sum(), [((4, 4), _normal)]),
    ("chunk", lambda a: a.chunk(3, dim=0)[2], [((5, 2), _normal)]),
    ("pad", lambda a: F.pad(a, (1, 2, 0, 1), value=0.5), [((2, 3, 4), _normal)]),
    ("pad_modes", lambda a: F.pad(F.pad(F.pad(a, (2, 1), "reflect"), (1, 0, 2, 1), "circular"),
                                  (0, 3, 1, -1), "replicate"), [((2, 3, 4), _normal)]),
    ("clone", lambda a: a.clone(), [((3,), _normal)]),
    ("cast", lambda a: F.cast(a, mg.float64), [((3,), _normal)]),
    ("sign", lambda a: a.sign() * a, [((3, 4), _spread)]),
    ("setitem", _setitem, [((4, 3), _normal), ((2,), _normal)]),
    ("copy_", lambda a, b: (a * 1.0).copy_(b) * a, [((3, 4), _normal), ((4,), _normal)]),
    ("fill_", lambda a: (a * 1.0).fill_(2.0) * a, [((3, 4), _normal)]),
    ("unfold", lambda a: mg.nn.functional.unfold(a, kernel_size=(2, 3), padding=1, stride=2),
     [((2, 2, 4, 5), _normal)]),
    ("fold", lambda a: mg.nn.functional.fold(a, (4, 5), kernel_size=(2, 3), padding=1,
                                             stride=2),
     [((2, 12, 9), _normal)]),
    ("conv2d", lambda x, w, b: mg.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=(1, 0),
                                                      dilation=(1, 2)),
     [((2, 2, 5, 6), _normal), ((3, 2, 2, 2), _normal), ((3,), _normal)]),
    ("conv2d_stride_1", lambda x, w: mg.nn.functional.conv2d(x, w, padding=1),
     [((1, 2, 4, 3), _normal), ((2, 2, 3, 2), _normal)]),
    # Grouped: depthwise without stride (its input gradient is a flipped-kernel correlation),
    # depthwise with a channel multiplier and stride (taps added into the image), and groups
    # of several channels each (a batched GEMM over the groups).
    ("conv2d_depthwise", lambda x, w, b: mg.nn.functional.conv2d(x, w, b, padding=1, groups=3),
     [((2, 3, 4, 5), _normal), ((3, 1, 3, 3), _normal), ((3,), _normal)]),
    ("conv2d_depthwise_strided", lambda x, w: mg.nn.functional.conv2d(x, w, stride=2, padding=1,
                                                                    dilation=(1, 2), groups=2),
     [((1, 2, 5, 6), _normal), ((4, 1, 2, 3), _normal)]),
    ("conv2d_groups", lambda x, w: mg.nn.functional.conv2d(x, w, stride=(1, 2), padding=(0, 1),
                                                          groups=2),
     [((2, 4, 4, 5), _normal), ((6, 2, 2, 2), _normal)]),
    ("conv_transpose2d", lambda x, w, b: mg.nn.functional.conv_transpose2d(
        x, w, b, stride=2, padding=1, output_padding=(1, 0), groups=2, dilation=(1, 2)),
     [((1, 4, 3, 2), _normal), ((4, 1, 2, 3), _normal), ((2,), _normal)]),
    # Its gradient's graph holds the adjoint, upsample_bilinear2d_backward.
    ("upsample_bilinear2d", lambda a: mg.nn.functional.interpolate(a, size=(5, 3),
                                                                   mode="bilinear"),
     [((1, 2, 3, 4), _normal)]),
    ("max_pool2d", lambda a: mg.nn.functional.max_pool2d(a, 3, stride=2, padding=1,
                                                         ceil_mode=True),
     [((1, 2, 6, 5), _spread)]),
    # The pooling gradient as a function: its own gradient is the gather of the winners.
    ("max_pool2d_grad", lambda a, g: mg.autograd.grad(mg.nn.functional.max_pool2d(a, 2), a, g,
                                                      create_graph=True)[0],
     [((1, 2, 4, 6), _spread), ((1, 2, 2, 3), _normal)]),
    ("cumsum", lambda a: a.cumsum(1) * a, [((3, 4), _normal)]),
    ("cumsum_negative_dim", lambda a: mg.cumsum(a, -3), [((3, 2, 2), _normal)]),
    ("floor", lambda a: a.floor() * a, [((3, 4), _spread)]),
    ("ceil", lambda a: a.ceil() * a, [((3, 4), _spread)]),
    ("round", lambda a: a.round() * a + a.round(decimals=1), [((3, 4), _spread)]),
    ("prod_dim", lambda a: a.prod(1), [((3, 5), _normal)]),
    ("prod_all_keepdim", lambda a: a.prod(keepdim=True), [((2, 3), _normal)]),
    ("prod_with_a_zero", lambda a: (a * mg.tensor([1.0, 0.0, 1.0])).prod(-1), [((2, 3), _normal)]),
    ("gather", lambda a: a.gather(1, mg.tensor([[0, 0], [2, 1]])), [((2, 3), _normal)]),
    ("index_select", lambda a: a.index_select(0, mg.tensor([2, 0, 2])), [((3, 2), _normal)]),
    ("repeat", lambda a: a.repeat(2, 1, 3), [((2, 3), _normal)]),
    ("sort", lambda a: a.sort(dim=0, descending=True).values, [((3, 4), _spread)]),
    ("topk", lambda a: a.topk(2).values, [((3, 4), _spread)]),
    ("unbind", lambda a: a.unbind(1)[2] * a.unbind(1)[0], [((2, 3), _normal)]),
    ("tensor_methods", lambda a, b: a.add(b, alpha=2).sub(b, alpha=0.5).addcmul(a, b, value=3)
     .addcdiv(a, b * b + 1, value=-2).lerp(b, 0.3).neg().div(b * b + 1),
     [((2, 3), _normal), ((3,), _normal)]),
    # attention (issue 20): the softmax that gives zeros for rows masked everywhere
    ("safe_softmax", lambda a: mg._safe_softmax(a.masked_fill(
        mg.tensor([[False] * 4, [True] * 4, [True, False, True, False]]), float("-inf")), -1),
     [((3, 4), _normal)]),
    ("scaled_dot_product_attention", lambda q, k, v, m: mg.nn.functional
     .scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.7, enable_gqa=True),
     [((1, 2, 3, 2), _normal), ((1, 1, 4, 2), _normal), ((1, 1, 4, 3), _normal),
      ((3, 4), _normal)]),
    # transformer-era tensor ops (issue 20)
    ("tril", lambda a: mg.tril(a, -1) + a.tril(1), [((2, 3, 4), _normal)]),
    ("triu", lambda a: mg.triu(a) * a.triu(diagonal=2), [((4, 3), _normal)]),
    ("rsqrt", lambda a: a.rsqrt(), [((3, 4), _positive)]),
    ("nan_to_num", lambda a: mg.nan_to_num(a * a, posinf=1.0), [((3, 2), _normal)]),
    ("einsum_batched_matmul", lambda a, b: mg.einsum("bij,bjk->bik", a, b),
     [((2, 3, 4), _normal), ((2, 4, 2), _normal)]),
    ("einsum_diagonal_and_sum", lambda a, b: mg.einsum("ii,ij->j", a, b),
     [((3, 3), _normal), ((3, 2), _normal)]),
    ("einsum_ellipsis_broadcast", lambda a, b: mg.einsum("...ij,...j->...i", a, b),
     [((2, 3, 4), _normal), ((1, 4), _normal)]),
    ("einsum_implicit_outer_and_sum", lambda a, b: mg.einsum("ij,k", a, b),
     [((2, 3), _normal), ((2,), _normal)]),
    ("einsum_three_operands", lambda a, b, c: mg.einsum("bn,anm,bm->ba", a, b, c),
     [((2, 3), _normal), ((2, 3, 4), _normal), ((2, 4), _normal)]),
    ("bmm_baddbmm_addmm", lambda a, b, c: mg.baddbmm(a, b, c, beta=0.5, alpha=2.0).sum(0)
     + mg.addmm(a[0], b[0], c[0], alpha=-1.0) + b.bmm(c)[1],
     [((2, 3, 2), _normal), ((2, 3, 4), _normal), ((2, 4, 2), _normal)]),
    ("outer", lambda a, b: mg.outer(a, b), [((3,), _normal), ((4,), _normal)]),
    ("scatter", lambda a, b: a.scatter(1, mg.tensor([[2, 0], [1, 3]]), b),
     [((2, 4), _normal), ((2, 3), _normal)]),
    ("scatter_value", lambda a: mg.scatter(a, 0, mg.tensor([[1, 0, 1]]), value=2.5),
     [((2, 3), _normal)]),
    ("scatter_add", lambda a, b: a.scatter_add(0, mg.tensor([[1, 0, 1], [1, 1, 0]]), b),
     [((3, 3), _normal), ((2, 3), _normal)]),
    ("index_add", lambda a, b: a.index_add(1, mg.tensor([2, 0, 2]), b, alpha=1.5),
     [((2, 4), _normal), ((2, 3), _normal)]),
    # (padding_idx and scale_grad_by_freq change the gradient on purpose: tests/nn and
    # tests/test_sparse.py check them against torch.)
    ("embedding", lambda a: mg.nn.functional.embedding(mg.tensor([[2, 0], [2, 3]]), a),
     [((4, 3), _normal)]),
    ("roll", lambda a: mg.roll(a, (1, -2), (0, 2)) + a.roll(3), [((3, 2, 4), _normal)]),
    ("flip", lambda a: mg.flip(a, (0, 2)) * a.flip(1), [((2, 3, 2), _normal)]),
    ("repeat_interleave", lambda a: a.repeat_interleave(mg.tensor([1, 0, 3]), dim=1).sum(1)
     + mg.repeat_interleave(a, 2)[1:4].sum(), [((2, 3), _normal)]),
    ("lerp_meshgrid_broadcast", lambda a, b: mg.lerp(a, b, 0.25) + mg.meshgrid(
        a[0], b[:, 1], indexing="xy")[1].sum() + mg.broadcast_to(b[0], (2, 3)),
     [((2, 3), _normal), ((2, 3), _normal)]),
    # losses (issue 21): probabilities through a sigmoid, so perturbations stay inside [0, 1]
    ("binary_cross_entropy", lambda a, b: mg.nn.functional.binary_cross_entropy(
        a.sigmoid(), b.sigmoid(), reduction="none"), [((3, 4), _normal), ((3, 4), _normal)]),
    # activations (issue 21)
    ("hardtanh_relu6", lambda a: mg.nn.functional.hardtanh(a, -1.5, 0.5)
     + mg.nn.functional.relu6(a * 4), [((3, 4), _spread)]),
    ("elu_selu_celu", lambda a: mg.nn.functional.elu(a, 0.7) + mg.nn.functional.selu(a)
     + mg.nn.functional.celu(a, 2.0), [((3, 4), _spread)]),
    ("softplus_logsigmoid", lambda a: mg.nn.functional.softplus(a, beta=2.0, threshold=1.0)
     + mg.nn.functional.logsigmoid(a), [((3, 4), _spread)]),
    ("hardsigmoid_hardswish", lambda a: mg.nn.functional.hardsigmoid(a * 2)
     + mg.nn.functional.hardswish(a * 2), [((3, 4), _spread)]),
    ("threshold", lambda a: mg.nn.functional.threshold(a, 0.3, -2.0), [((3, 4), _spread)]),
    # recurrent layers (issue 21): torch's one-step cells, and whole packed sequences (uneven
    # lengths 4, 3, 1) in each direction, the LSTM with a projection
    ("lstm_cell", lambda x, h, c, wi, wh, bi, bh: mg.lstm_cell(x, (h, c), wi, wh, bi, bh)[0]
     * mg.lstm_cell(x, (h, c), wi, wh, bi, bh)[1],
     [((2, 3), _normal), ((2, 2), _normal), ((2, 2), _normal), ((8, 3), _normal),
      ((8, 2), _normal), ((8,), _normal), ((8,), _normal)]),
    ("gru_cell", lambda x, h, wi, wh, bi, bh: mg.gru_cell(x, h, wi, wh, bi, bh),
     [((2, 3), _normal), ((2, 2), _normal), ((6, 3), _normal), ((6, 2), _normal),
      ((6,), _normal), ((6,), _normal)]),
    ("rnn_cells", lambda x, h, wi, wh: mg.rnn_tanh_cell(x, h, wi, wh)
     + mg.rnn_relu_cell(x, h, wi, wh),
     [((3, 2), _normal), ((3, 2), _normal), ((2, 2), _normal), ((2, 2), _normal)]),
    ("lstm_packed_projected", lambda xg, s, wh, bh, wr: F.lstm(xg, s, wh, bh, wr,
                                                              batch_sizes=(3, 2, 2, 1),
                                                              reverse=False),
     [((8, 12), _normal), ((3, 5), _normal), ((12, 2), _normal), ((12,), _normal),
      ((2, 3), _normal)]),
    ("lstm_packed_reverse", lambda xg, s, wh: F.lstm(xg, s, wh, None, batch_sizes=(3, 2, 2, 1),
                                                     reverse=True),
     [((8, 8), _normal), ((3, 4), _normal), ((8, 2), _normal)]),
    # a whole LSTM layer, input projection included: padded (oneDNN's case in float32) and
    # packed in reverse; each step's h, then each final c
    ("lstm_layer_padded", lambda x, s, wi, wh, bi, bh: F.lstm_layer(
        x, s, wi, wh, bi, bh, batch_sizes=(2, 2, 2), reverse=False),
     [((6, 3), _normal), ((2, 4), _normal), ((8, 3), _normal), ((8, 2), _normal),
      ((8,), _normal), ((8,), _normal)]),
    ("lstm_layer_packed_reverse", lambda x, s, wi, wh: F.lstm_layer(
        x, s, wi, wh, batch_sizes=(3, 2, 2, 1), reverse=True),
     [((8, 2), _normal), ((3, 4), _normal), ((8, 2), _normal), ((8, 2), _normal)]),
    ("gru_packed", lambda xg, h, wh, bh: F.gru(xg, h, wh, bh, batch_sizes=(3, 2, 2, 1),
                                               reverse=False)
     + F.gru(xg, h, wh, bh, batch_sizes=(3, 2, 2, 1), reverse=True),
     [((8, 6), _normal), ((3, 2), _normal), ((6, 2), _normal), ((6,), _normal)]),
    ("rnn_packed", lambda xg, h, wh, bh: F.rnn_tanh(xg, h, wh, bh, batch_sizes=(3, 2, 2, 1),
                                                    reverse=True)
     + F.rnn_relu(xg, h, wh, bh, batch_sizes=(3, 2, 2, 1), reverse=False),
     [((8, 2), _spread), ((3, 2), _spread), ((2, 2), _normal), ((2,), _normal)]),
]


def _inputs(specs, rng):
    return tuple(mg.tensor(sampler(shape, rng), requires_grad=True) for shape, sampler in specs)


@pytest.mark.parametrize("name,fn,specs", CASES, ids=[c[0] for c in CASES])
def test_gradcheck(name, fn, specs, float64, rng):
    assert gradcheck(fn, _inputs(specs, rng))


@pytest.mark.parametrize("name,fn,specs", CASES, ids=[c[0] for c in CASES])
def test_gradgradcheck(name, fn, specs, float64, rng):
    assert gradgradcheck(fn, _inputs(specs, rng))


def _ops_reached(fn, specs, rng):
    """Names of the ops in the graph of fn and in the graph of its gradient, which is where
    the ops that only backward rules use (index_scatter, say) appear."""
    inputs = _inputs(specs, rng)
    out = fn(*inputs)
    # A seed that requires grad, so the gradient's graph records every op a rule runs.
    seed = mg.ones(*out.shape, requires_grad=True)
    grads = mg.autograd.grad(out, inputs, seed, create_graph=True, allow_unused=True)
    roots = [t.grad_fn for t in (out,) + grads if t is not None and t.grad_fn is not None]
    return {node.op.name for node in reachable(roots) if isinstance(node, OpNode)}


def test_every_op_has_a_case(float64, rng):
    reached = set().union(*(_ops_reached(fn, specs, rng) for _, fn, specs in CASES))
    untested = sorted(set(REGISTRY) - reached)
    assert not untested, f"ops with no gradcheck case in CASES: {untested}"


def test_cast_gradient_comes_back_in_the_input_dtype(float64):
    # Finite differences through float32 are too coarse for gradcheck; check exactly instead.
    x = mg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x.float() * mg.tensor([1.0, 2.0, 3.0], dtype=mg.float32)
    y.sum().backward()
    assert y.dtype == mg.float32
    assert x.grad.dtype == mg.float64
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])
    assert not x.long().requires_grad


class _WrongSquare(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x  # should be 2 * g * x


def test_gradcheck_catches_a_wrong_backward(float64, rng):
    x = mg.tensor(rng.standard_normal(4), requires_grad=True)
    with pytest.raises(GradcheckError, match="numerical .* analytical"):
        gradcheck(_WrongSquare.apply, (x,))
    assert gradcheck(_WrongSquare.apply, (x,), raise_exception=False) is False


def test_gradgradcheck_catches_a_wrong_second_derivative(float64, rng):
    class FirstOrderOnly(Function):
        # Correct first derivative of x^3, but computed from a detached value: the second
        # derivative it implies is wrong.
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x.detach() ** 2

    x = mg.tensor(rng.standard_normal(3) + 1.5, requires_grad=True)
    assert gradcheck(FirstOrderOnly.apply, (x,))
    with pytest.raises(GradcheckError):
        gradgradcheck(FirstOrderOnly.apply, (x,))
