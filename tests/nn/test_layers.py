"""Layer behaviour beyond gradients: construction, modes, buffers, and the errors bad
arguments raise."""
import warnings

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.nn import functional as F


# ----------------------------------------------------------------------------- construction
@pytest.mark.parametrize("make,error,message", [
    (lambda: nn.Linear(0, 3), ValueError, "in_features must be a positive integer, got 0"),
    (lambda: nn.Linear(3, 2.5), ValueError, "out_features must be a positive integer, got 2.5"),
    (lambda: nn.Conv2d(3, 4, 0), RuntimeError, "kernel_size must be at least 1"),
    (lambda: nn.Conv2d(3, 4, 3, stride=0), RuntimeError, "stride must be at least 1"),
    (lambda: nn.Conv2d(3, 4, 3, padding=-1), RuntimeError, "padding must be at least 0"),
    (lambda: nn.Conv2d(3, 4, 3, padding="full"), ValueError, "'valid' or 'same'"),
    (lambda: nn.Conv2d(3, 4, 3, stride=2, padding="same"), ValueError,
     "not supported for strided"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), ValueError, "divisible by groups (2)"),
    (lambda: nn.MaxPool2d(2, padding=2), RuntimeError, "at most half of the kernel size"),
    (lambda: nn.AvgPool2d(2, divisor_override=0), RuntimeError,
     "divisor_override must be a positive"),
    (lambda: nn.Dropout(1.5), ValueError, "between 0 and 1, but got 1.5"),
    (lambda: nn.BatchNorm2d(0), ValueError, "num_features must be a positive integer"),
    (lambda: nn.LayerNorm(()), ValueError, "at least one dimension"),
    (lambda: nn.Embedding(5, 2, padding_idx=5), AssertionError,
     "padding_idx must be within num_embeddings"),
    (lambda: nn.GELU("fast"), ValueError, "'none' or 'tanh'"),
    (lambda: nn.CrossEntropyLoss(reduction="avg"), ValueError,
     "avg is not a valid value for reduction"),
])
def test_bad_constructor_arguments_say_what_was_expected(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert message in str(info.value)


def test_kernel_size_must_be_int_or_pair():
    with pytest.raises(TypeError, match=r"kernel_size must be an int or a pair of ints"):
        nn.Conv2d(1, 1, (1, 2, 3))


def test_unsupported_options_are_refused_not_ignored():
    with pytest.raises(NotImplementedError, match="sparse"):
        nn.EmbeddingBag(3, 2, sparse=True)


def test_parameters_take_the_default_dtype():
    mg.set_default_dtype(np.float32)  # the fixture restores the previous default
    assert nn.Linear(2, 3).weight.dtype == np.float32
    assert nn.Conv2d(1, 2, 3).bias.dtype == np.float32
    assert nn.Linear(2, 3, dtype=mg.float64).weight.dtype == np.float64


def test_manual_seed_makes_initial_weights_reproducible():
    mg.manual_seed(3)
    a = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(4, 2))
    mg.manual_seed(3)
    b = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(4, 2))
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.data, q.data)
    assert not np.array_equal(a[1].weight.data, nn.Linear(4, 2).weight.data)


@pytest.mark.parametrize("layer,fan_in", [(nn.Linear(50, 40), 50),
                                          (nn.Conv2d(6, 30, (3, 2), groups=2), 3 * 3 * 2)])
def test_default_init_is_uniform_within_one_over_sqrt_fan_in(layer, fan_in):
    bound = 1 / np.sqrt(fan_in)
    for p in (layer.weight, layer.bias):
        assert np.abs(p.data).max() <= bound
    # Uniform on [-bound, bound]: the largest of 2000 draws comes close to the bound.
    assert np.abs(layer.weight.data).max() > 0.9 * bound


def test_repr_names_the_configuration():
    assert repr(nn.Linear(3, 2, bias=False)) == "Linear(in_features=3, out_features=2, bias=False)"
    assert "stride=(2, 2), padding=(1, 1)" in repr(nn.Conv2d(1, 2, 3, 2, 1))
    assert repr(nn.Sequential(nn.ReLU())) == "Sequential(\n  (0): ReLU()\n)"


# ----------------------------------------------------------------------------- bad inputs
def test_conv2d_names_the_expected_channel_count():
    with pytest.raises(RuntimeError, match=r"expected input\[2, 4, 8, 8\] to have 3 channels, "
                                           r"but got 4 channels instead"):
        nn.Conv2d(3, 8, 3)(mg.randn(2, 4, 8, 8))


@pytest.mark.parametrize("call,error,message", [
    (lambda: nn.Linear(4, 2)(mg.randn(3, 5)), RuntimeError,
     "expected input with last dimension 4, got shape (3, 5)"),
    (lambda: nn.Conv2d(1, 2, 3)(mg.randn(8, 8)), RuntimeError,
     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [8, 8]"),
    (lambda: nn.Conv2d(1, 2, 5)(mg.randn(1, 1, 3, 8)), RuntimeError,
     "larger than the padded input"),
    (lambda: nn.MaxPool2d(4)(mg.randn(1, 1, 3, 3)), RuntimeError, "larger than the padded input"),
    (lambda: nn.BatchNorm2d(3)(mg.randn(2, 3, 4)), ValueError,
     "expected 4-D input, got shape (2, 3, 4)"),
    (lambda: nn.BatchNorm1d(3)(mg.randn(2, 4)), RuntimeError,
     "expected input with 3 channels, got 4"),
    (lambda: nn.BatchNorm1d(3)(mg.randn(1, 3)), ValueError, "more than 1 value per channel"),
    (lambda: nn.LayerNorm((2, 3))(mg.randn(3, 2)), RuntimeError,
     "Given normalized_shape=[2, 3], expected input with shape [*2, 3], but got input of "
     "size[3, 2]"),
    (lambda: F.fold(mg.randn(1, 5, 4), (3, 3), 2), RuntimeError,
     "expected an input of shape (N, C * 4, 4)"),
])
def test_bad_inputs_say_what_was_expected(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_embedding_index_errors_name_the_index_and_the_table_size():
    emb = nn.Embedding(10, 3)
    with pytest.raises(IndexError, match=r"index 12 is out of range for num_embeddings=10"):
        emb(mg.tensor([1, 12, 3]))
    with pytest.raises(IndexError, match=r"index -1 is out of range"):
        emb(mg.tensor([-1]))
    with pytest.raises(RuntimeError, match="integer dtype, got float64"):
        emb(mg.tensor([1.0]))


@pytest.mark.parametrize("call,error,message", [
    (lambda: F.cross_entropy(mg.randn(3, 4), mg.tensor([0, 4, 1])), IndexError,
     "Target 4 is out of bounds."),
    (lambda: F.nll_loss(mg.randn(3, 4), mg.tensor([0, -2, 1])), IndexError,
     "Target -2 is out of bounds."),
    (lambda: F.cross_entropy(mg.randn(3, 4), mg.tensor([0.0, 1.0, 1.0])), RuntimeError,
     "expected target dtype to be Long or Byte, but got Double"),
    (lambda: F.nll_loss(mg.randn(3, 4), mg.tensor([0.0, 1.0, 1.0])), RuntimeError,
     "expected target dtype to be Long or Byte, but got Double"),
    (lambda: F.cross_entropy(mg.randn(3, 4), mg.tensor([0, 1])), ValueError,
     "Expected input batch_size (3) to match target batch_size (2)."),
    (lambda: F.cross_entropy(mg.randn(3, 4), mg.tensor([0, 1, 2]), mg.ones(3)), RuntimeError,
     "weight tensor should be defined either for all 4 classes or no classes"),
    (lambda: F.mse_loss(mg.randn(3, 2), mg.randn(3)), RuntimeError,
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 1"),
    (lambda: F.mse_loss(mg.randn(3), mg.randn(3), reduction="mean!"), ValueError,
     "mean! is not a valid value for reduction"),
])
def test_loss_argument_errors(call, error, message):
    with pytest.raises(error) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the broadcasting warning before the mse error
        call()
    assert message in str(info.value)


def test_ignore_index_targets_need_not_be_valid_classes():
    x = mg.randn(3, 4)
    loss = F.cross_entropy(x, mg.tensor([1, -100, 2]))
    expected = F.cross_entropy(x[[0, 2]], mg.tensor([1, 2]))
    np.testing.assert_allclose(loss.item(), expected.item())


# ----------------------------------------------------------------------------- modes, buffers
def test_dropout_is_identity_in_eval_and_masks_in_training():
    drop = nn.Dropout(0.25)
    x = mg.ones(200, 100)
    out = drop(x).numpy()
    kept = out != 0
    # 20000 Bernoulli(0.75) draws: the fraction is within 0.01 of 0.75 (about 3 sigma).
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(out[kept], 1 / 0.75)
    drop.eval()
    assert drop(x) is x


def test_dropout_mask_follows_the_seed_and_p_one_zeroes_everything():
    x = mg.randn(5, 6)
    mg.manual_seed(11)
    a = F.dropout(x, 0.5).data
    mg.manual_seed(11)
    b = F.dropout(x, 0.5).data
    np.testing.assert_array_equal(a, b)
    assert (a == 0).any() and (a != 0).any()
    np.testing.assert_array_equal(F.dropout(x, 1.0).data, 0)


def test_batch_norm_buffers_and_running_statistics():
    bn = nn.BatchNorm1d(2)
    assert [name for name, _ in bn.named_buffers()] == [
        "running_mean", "running_var", "num_batches_tracked"]
    assert bn.num_batches_tracked.dtype == np.int64
    x = mg.tensor([[1.0, 10.0], [3.0, 14.0], [5.0, 12.0]])
    out = bn(x)
    np.testing.assert_allclose(out.data.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(bn.running_mean.data, 0.1 * np.array([3.0, 12.0]))
    np.testing.assert_allclose(bn.running_var.data, 0.9 + 0.1 * np.array([4.0, 4.0]))
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    expected = (x.data - bn.running_mean.data) / np.sqrt(bn.running_var.data + 1e-5)
    np.testing.assert_allclose(bn(x).data, expected)
    assert bn.num_batches_tracked.item() == 1


def test_batch_norm_without_momentum_averages_all_batches():
    bn = nn.BatchNorm1d(1, momentum=None)
    for value in (2.0, 4.0, 9.0):
        bn(mg.tensor([[value - 1], [value + 1]]))
    np.testing.assert_allclose(bn.running_mean.data, [5.0])
    np.testing.assert_allclose(bn.running_var.data, [2.0])


def test_double_converts_batch_norm_statistics_but_not_the_counter():
    mg.set_default_dtype(np.float32)
    bn = nn.BatchNorm2d(3).double()
    assert bn.running_var.dtype == np.float64 and bn.weight.dtype == np.float64
    assert bn.num_batches_tracked.dtype == np.int64


def test_embedding_padding_row_starts_at_zero_and_gets_no_gradient():
    emb = nn.Embedding(4, 3, padding_idx=-1)
    assert emb.padding_idx == 3
    np.testing.assert_array_equal(emb.weight.data[3], 0)
    emb(mg.tensor([3, 1, 3])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.data[3], 0)
    np.testing.assert_array_equal(emb.weight.grad.data[1], 1)


def test_embedding_from_pretrained_shares_storage_and_freezes():
    table = mg.randn(4, 2)
    emb = nn.Embedding.from_pretrained(table)
    assert not emb.weight.requires_grad
    assert np.shares_memory(emb.weight.data, table.data)
    np.testing.assert_array_equal(emb(mg.tensor([2])).data, table.data[[2]])


def test_max_pool_return_indices_locate_the_maxima():
    x = mg.randn(2, 3, 6, 6)
    out, idx = nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)(x)
    flat = x.data.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.data.reshape(2, 3, -1), 2),
                                  out.data.reshape(2, 3, -1))


def test_conv2d_accepts_unbatched_input_and_same_padding_keeps_the_size():
    conv = nn.Conv2d(2, 3, (2, 4), padding="same", dilation=(1, 2))
    assert conv(mg.randn(2, 7, 6)).shape == (3, 7, 6)
    assert conv(mg.randn(5, 2, 7, 6)).shape == (5, 3, 7, 6)


def test_conv2d_matches_a_direct_sum_over_the_kernel():
    conv = nn.Conv2d(2, 3, (2, 3), stride=(2, 1), padding=(1, 0))
    x = mg.randn(2, 2, 5, 6)
    xp = np.pad(x.data, ((0, 0), (0, 0), (1, 1), (0, 0)))
    w = conv.weight.data
    out = conv(x).data
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            patch = xp[:, :, 2 * i:2 * i + 2, j:j + 3]
            np.testing.assert_allclose(out[:, :, i, j],
                                       np.einsum("nckl,ockl->no", patch, w) + conv.bias.data)


def test_one_hot():
    np.testing.assert_array_equal(F.one_hot(mg.tensor([2, 0])).data, [[0, 0, 1], [1, 0, 0]])
    assert F.one_hot(mg.tensor([1]), 4).dtype == np.int64
    with pytest.raises(RuntimeError, match="index 4 is out of range for num_classes=4"):
        F.one_hot(mg.tensor([4]), 4)
