"""IterableDataset through DataLoader, against torch: batches, drop_last, batching off,
len(), torch's errors, and workers that each read their own copy of the stream."""
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as torch_data  # noqa: E402

import torch_twins  # noqa: E402

import mpigrad.utils.data as mpigrad_data  # noqa: E402


def _both(make_dataset_name, *args, dataset_kwargs=None, **loader_kwargs):
    """The batches of the same stream read through mpigrad's and torch's DataLoader."""
    out = []
    for prefix, data in (("Mpigrad", mpigrad_data), ("Torch", torch_data)):
        dataset = getattr(torch_twins, prefix + make_dataset_name)(*args,
                                                                   **(dataset_kwargs or {}))
        loader = data.DataLoader(dataset, **loader_kwargs)
        out.append([torch_twins.plain(batch) for batch in loader])
    return out


@pytest.mark.parametrize("loader_kwargs", [
    dict(batch_size=3),
    dict(batch_size=3, drop_last=True),
    dict(batch_size=5, drop_last=True),
    dict(batch_size=None),
    dict(),
])
def test_in_process_batches_equal_torchs(loader_kwargs):
    ours, theirs = _both("RangeStream", 2, 13, **loader_kwargs)
    assert ours == theirs and ours


def test_numpy_samples_keep_their_dtypes_batched_or_not():
    for batch_size in (4, None):
        ours, theirs = _both("RangeStream", 0, 6, dataset_kwargs=dict(numpy_samples=True),
                             batch_size=batch_size)
        assert ours == theirs


def test_len_only_when_the_dataset_has_one():
    for kwargs in (dict(batch_size=4), dict(batch_size=4, drop_last=True),
                   dict(batch_size=None)):
        ours = mpigrad_data.DataLoader(torch_twins.MpigradSizedStream(0, 10), **kwargs)
        theirs = torch_data.DataLoader(torch_twins.TorchSizedStream(0, 10), **kwargs)
        assert len(ours) == len(theirs)
    for loader in (mpigrad_data.DataLoader(torch_twins.MpigradRangeStream(0, 10)),
                   torch_data.DataLoader(torch_twins.TorchRangeStream(0, 10))):
        with pytest.raises(TypeError):
            len(loader)


@pytest.mark.parametrize("kwargs, message", [
    (dict(shuffle=True), "expected unspecified shuffle option, but got shuffle=True"),
    (dict(sampler=[0, 1]), "expected unspecified sampler option"),
    (dict(batch_sampler=[[0, 1]]), "expected unspecified batch_sampler option"),
])
def test_choosing_an_order_is_torchs_error(kwargs, message):
    for loader, dataset in ((mpigrad_data.DataLoader, torch_twins.MpigradRangeStream(0, 4)),
                            (torch_data.DataLoader, torch_twins.TorchRangeStream(0, 4))):
        with pytest.raises(ValueError, match=message):
            loader(dataset, **kwargs)


def test_a_stream_is_read_afresh_each_pass():
    loader = mpigrad_data.DataLoader(torch_twins.MpigradRangeStream(0, 5), batch_size=2)
    assert [b[0].tolist() for b in loader] == [b[0].tolist() for b in loader] == [
        [0, 1], [2, 3], [4]]


# Worker cases: each runs both frameworks' loaders with two forked workers.

def test_workers_that_split_the_stream_give_torchs_batches_in_torchs_order():
    # 14 samples, 7 per worker: worker 0 gives [2..8], worker 1 [9..15], batches alternate.
    for kwargs in (dict(batch_size=3), dict(batch_size=3, drop_last=True),
                   dict(batch_size=None)):
        ours, theirs = _both("RangeStream", 2, 16, num_workers=2, **kwargs)
        assert ours == theirs and ours


def test_workers_narrowed_by_worker_init_fn_give_torchs_batches():
    batches = []
    for data, prefix in ((mpigrad_data, "mpigrad"), (torch_data, "torch")):
        dataset = getattr(torch_twins, prefix.capitalize() + "RangeStream")(3, 10, split=False)
        loader = data.DataLoader(dataset, batch_size=2, num_workers=2,
                                 worker_init_fn=getattr(torch_twins, prefix + "_take_share"))
        batches.append([torch_twins.plain(batch) for batch in loader])
    assert batches[0] == batches[1]
    assert [batch[1][0][2] for batch in batches[0]] == [[3, 4], [7, 8], [5, 6], [9]]


def test_workers_that_do_not_split_each_yield_the_whole_stream_as_torchs():
    ours, theirs = _both("RangeStream", 0, 5, dataset_kwargs=dict(split=False),
                         batch_size=2, num_workers=2, persistent_workers=True)
    assert ours == theirs
    assert [batch[1][0][2] for batch in ours] == [[0, 1], [0, 1], [2, 3], [2, 3], [4], [4]]


@pytest.mark.parametrize("stop", [7, 1])
def test_workers_with_streams_of_unequal_length_lose_and_repeat_nothing(stop):
    # ceil(stop / 2) samples for worker 0, the rest (3, or none) for worker 1. When a batch
    # comes depends on when the end of a worker's stream is seen, in torch as here; each
    # worker's batches come in its stream's order, and none is lost or repeated.
    ours, theirs = _both("RangeStream", 0, stop, batch_size=1, num_workers=2,
                         prefetch_factor=3)
    firsts = [batch[1][0][2][0] for batch in ours]
    assert sorted(firsts) == sorted(batch[1][0][2][0] for batch in theirs) == list(range(stop))
    share = -(-stop // 2)
    assert [i for i in firsts if i < share] == list(range(share))
    assert [i for i in firsts if i >= share] == list(range(share, stop))


def test_persistent_workers_read_the_stream_afresh_each_pass():
    loader = mpigrad_data.DataLoader(torch_twins.MpigradRangeStream(0, 6), batch_size=2,
                                     num_workers=2, persistent_workers=True)
    passes = [[batch[0].tolist() for batch in loader] for _ in range(2)]
    assert passes[0] == passes[1] == [[0, 1], [3, 4], [2], [5]]
