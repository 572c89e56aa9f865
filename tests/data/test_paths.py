"""mpigrad.data is the data package; mpigrad.utils.data is torch's path to the same objects."""
import mpigrad.data
import mpigrad.data.datasets
import mpigrad.utils.data


def test_torch_path_hands_on_the_same_objects():
    assert mpigrad.data.__all__ == mpigrad.utils.data.__all__
    for name in mpigrad.data.__all__:
        assert getattr(mpigrad.utils.data, name) is getattr(mpigrad.data, name), name
    assert mpigrad.utils.data.DistributedSampler is mpigrad.data.DistributedSampler


def test_concrete_datasets_live_in_datasets():
    for name in mpigrad.data.datasets.__all__:
        assert getattr(mpigrad.data, name) is getattr(mpigrad.data.datasets, name), name
