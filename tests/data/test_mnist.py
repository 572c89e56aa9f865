import numpy as np
import pytest

from mpigrad.data import MNIST, write_idx


def _write_split(folder, prefix, images, labels, suffix=""):
    folder.mkdir(parents=True, exist_ok=True)
    write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
    write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels)


@pytest.fixture
def pixels():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), np.array([5, 0, 4, 1, 9], np.uint8)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_reads_images_as_unit_float_and_labels_as_int64(tmp_path, pixels, suffix):
    images, labels = pixels
    _write_split(tmp_path, "train", images, labels, suffix)
    dataset = MNIST(tmp_path)
    x, y = dataset.tensors
    assert len(dataset) == 5
    assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32
    assert y.dtype == np.int64
    np.testing.assert_allclose(x.data[:, 0], images / 255, rtol=1e-6)
    np.testing.assert_array_equal(y.data, labels)
    image, label = dataset[3]
    assert image.shape == (1, 28, 28) and label.item() == 1


def test_test_split_reads_t10k_files_from_torchvision_layout(tmp_path, pixels):
    images, labels = pixels
    _write_split(tmp_path, "train", images, labels)
    _write_split(tmp_path / "MNIST" / "raw", "t10k", images[:2], labels[:2], ".gz")
    assert len(MNIST(tmp_path, train=True)) == 5
    test = MNIST(tmp_path, train=False)
    np.testing.assert_array_equal(test.tensors[1].data, [5, 0])


def test_missing_file_names_it_and_where_it_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte") as info:
        MNIST(tmp_path, train=False)
    assert "does not download" in str(info.value)


def test_count_mismatch_between_images_and_labels(tmp_path, pixels):
    images, labels = pixels
    _write_split(tmp_path, "train", images, labels[:4])
    with pytest.raises(ValueError, match="5 images but .* 4 labels"):
        MNIST(tmp_path)


def test_swapped_files_are_rejected_with_what_was_expected(tmp_path, pixels):
    images, labels = pixels
    _write_split(tmp_path, "train", images, labels)
    write_idx(tmp_path / "train-images-idx3-ubyte", labels)
    with pytest.raises(ValueError, match="expected 3-d unsigned-byte images"):
        MNIST(tmp_path)


def test_float_label_file_is_rejected(tmp_path, pixels):
    images, labels = pixels
    _write_split(tmp_path, "train", images, labels.astype(np.float32))
    with pytest.raises(ValueError, match="expected 1-d unsigned-byte labels"):
        MNIST(tmp_path)
