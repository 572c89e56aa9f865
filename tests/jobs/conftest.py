"""Session fixtures of the train_gpt tests (test_train_gpt.py, its --fsdp and
--pipeline-stages siblings): built once, shared by every file that compares with them."""
from pathlib import Path

import pytest

from tests.jobs.test_train_gpt import GLOBAL_BATCH, JOB, _final, reference_run, run


@pytest.fixture(scope="session")
def text(tmp_path_factory):
    """The training text: train_gpt.py's own source, twice."""
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text(Path(JOB).read_text() * 2)
    return str(path)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """`trained(ranks, *options)`: (checkpoint directory, finished process) of train_gpt.py
    run with these options, launched once per configuration in the session: N ranks'
    run is both what must equal one process and the uninterrupted run that the same
    configuration preempted and resumed must equal bit for bit."""
    runs = {}

    def trained(ranks, *options):
        key = (ranks, *options)
        if key not in runs:
            directory = tmp_path_factory.mktemp("trained")
            runs[key] = directory, run(ranks, *options, "--checkpoint", str(directory))
        return runs[key]

    return trained


@pytest.fixture(scope="session")
def one_process(trained, text):
    """The final weights of the reference run in one process with the whole global batch:
    what N data-parallel ranks, N shards and N pipeline stages must each end with."""
    directory, _ = trained(1, *reference_run(text), "--batch-size", str(GLOBAL_BATCH))
    return _final(directory)
