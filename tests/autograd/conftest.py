import numpy as np
import pytest

import mpigrad as mg


@pytest.fixture
def float64():
    """Run a test with float64 as the default dtype (gradient checks need it)."""
    previous = mg.get_default_dtype()
    mg.set_default_dtype(mg.float64)
    yield
    mg.set_default_dtype(previous)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
