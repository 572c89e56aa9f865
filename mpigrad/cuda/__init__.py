"""`mpigrad.cuda`: what torch.cuda says on a machine without CUDA, truthfully, so device-
selection preambles (`"cuda" if torch.cuda.is_available() else "cpu"`) run unchanged.
Querying a CUDA device raises as torch does without CUDA; seeding is a no-op, as torch's is
until CUDA is initialised."""

from . import amp  # noqa: F401

_NO_CUDA = "Torch not compiled with CUDA enabled: mpigrad has no CUDA support, it runs on the CPU only"


def is_available():
    return False


def device_count():
    return 0


def is_initialized():
    return False


def manual_seed(seed):
    """Nothing to seed: there is no CUDA generator."""


def manual_seed_all(seed):
    """Nothing to seed: there is no CUDA generator."""


def empty_cache():
    """No CUDA memory to release."""


def _unavailable(*args, **kwargs):
    raise AssertionError(_NO_CUDA)


current_device = synchronize = get_device_name = get_device_properties = set_device = \
    _unavailable
