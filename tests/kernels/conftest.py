import pytest

import mpigrad as mg


@pytest.fixture
def restore_threads():
    """The test may call set_num_threads: the count before it is set again after it."""
    before = mg.get_num_threads()
    yield
    mg.set_num_threads(before)
