"""Session fixtures of the train_gpt tests (test_train_gpt.py, its --fsdp and
--pipeline-stages siblings): built once, shared by every file that compares with them."""
from pathlib import Path

import pytest

from tests.jobs.test_train_gpt import GLOBAL_BATCH, JOB, _final, run, short_run


@pytest.fixture(scope="session")
def text(tmp_path_factory):
    """The training text: train_gpt.py's own source, twice."""
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text(Path(JOB).read_text() * 2)
    return str(path)


@pytest.fixture(scope="session")
def one_process(tmp_path_factory, text):
    """The final weights of the short run in one process with the whole global batch: what
    N data-parallel ranks, N shards and N pipeline stages must each end with."""
    directory = tmp_path_factory.mktemp("one")
    run(1, *short_run(text), "--batch-size", str(GLOBAL_BATCH), "--checkpoint", str(directory))
    return _final(directory)
