import numpy as np
import pytest

from mpigrad.data import SyntheticImages


def _arrays(dataset):
    images, labels = dataset.tensors
    return images.numpy(), labels.numpy()


def test_shapes_dtypes_and_balanced_classes():
    images, labels = _arrays(SyntheticImages(1000, num_classes=8, image_size=12, channels=3))
    assert images.shape == (1000, 3, 12, 12) and images.dtype == np.float32
    assert labels.dtype == np.int64
    assert np.bincount(labels).tolist() == [125] * 8
    assert labels[:8].tolist() != list(range(8))


def test_same_seed_gives_identical_data_and_other_seed_differs():
    a, b = _arrays(SyntheticImages(300, seed=4)), _arrays(SyntheticImages(300, seed=4))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.allclose(a[0], _arrays(SyntheticImages(300, seed=5))[0])


def _class_means(images, labels, num_classes=10):
    return np.stack([images[labels == k].mean(axis=0) for k in range(num_classes)])


def test_train_and_test_are_different_samples_of_the_same_task():
    train = _arrays(SyntheticImages(2000, seed=1))
    test = _arrays(SyntheticImages(2000, seed=1, train=False))
    assert not np.allclose(train[0][:10], test[0][:10])
    train_means = _class_means(*train).reshape(10, -1)
    test_means = _class_means(*test).reshape(10, -1)
    correlation = np.corrcoef(train_means, test_means)[:10, 10:]
    assert np.all(np.diag(correlation) > 0.8)
    assert np.all(correlation[~np.eye(10, dtype=bool)] < 0.7)


def test_noise_free_images_are_crops_of_one_prototype_per_class():
    images, labels = _arrays(SyntheticImages(50, num_classes=2, image_size=6, noise=0, max_shift=0))
    zeros, ones = images[labels == 0], images[labels == 1]
    assert len(zeros) == 25 and np.all(zeros == zeros[0])
    assert not np.allclose(zeros[0], ones[0])


def _softmax_regression(x, y, num_classes, epochs=3, lr=0.01, batch=64):
    rng = np.random.default_rng(0)
    weights = np.zeros((x.shape[1], num_classes), np.float32)
    bias = np.zeros(num_classes, np.float32)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            rows = order[start : start + batch]
            logits = x[rows] @ weights + bias
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            probs[np.arange(len(rows)), y[rows]] -= 1
            weights -= lr * x[rows].T @ probs / len(rows)
            bias -= lr * probs.mean(axis=0)
    return weights, bias


def test_a_linear_model_learns_it_but_no_single_pixel_does():
    train_x, train_y = _arrays(SyntheticImages(5000, seed=3))
    test_x, test_y = _arrays(SyntheticImages(1000, seed=3, train=False))
    train_x, test_x = train_x.reshape(len(train_x), -1), test_x.reshape(len(test_x), -1)

    weights, bias = _softmax_regression(train_x, train_y, 10)
    accuracy = np.mean((test_x @ weights + bias).argmax(axis=1) == test_y)
    assert accuracy > 0.9

    # Nearest class mean on one pixel at a time: the best pixel stays far below that.
    means = _class_means(train_x, train_y)
    nearest = np.abs(test_x[:, None, :] - means[None, :, :]).argmin(axis=1)
    best_pixel = np.max(np.mean(nearest == test_y[:, None], axis=0))
    assert best_pixel < 0.4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_samples=-1), "num_samples should be an integer >= 0"),
        (dict(num_samples=10, image_size=0), "image_size should be an integer >= 1"),
        (dict(num_samples=10, seed=-3), "seed should be an integer >= 0"),
        (dict(num_samples=10, noise=-1.0), "noise should be a standard deviation >= 0"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SyntheticImages(**kwargs)
