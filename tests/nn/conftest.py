import numpy as np
import pytest

import mpigrad as mg


@pytest.fixture(autouse=True)
def float64_and_seeded():
    """Layers are built in float64 (gradcheck and the torch oracle need it) from a fixed seed;
    the default dtype is restored afterwards."""
    previous = mg.get_default_dtype()
    mg.set_default_dtype(np.float64)
    mg.manual_seed(0)
    yield
    mg.set_default_dtype(previous)


@pytest.fixture
def rng():
    """A fresh seeded numpy generator, for the inputs tests compare against torch."""
    return np.random.default_rng(0)
