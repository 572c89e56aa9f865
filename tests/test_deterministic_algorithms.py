"""use_deterministic_algorithms and the debug mode: torch's flags, read back and validated."""
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402

MODULES = (torch, mg)


@pytest.fixture(autouse=True)
def _restore():
    yield
    for module in MODULES:
        module.use_deterministic_algorithms(False)


def _flags(module):
    return (module.are_deterministic_algorithms_enabled(),
            module.is_deterministic_algorithms_warn_only_enabled(),
            module.get_deterministic_debug_mode())


def test_flags_follow_torch_through_every_setting():
    settings = [((True,), {}), ((True,), {"warn_only": True}), ((False,), {}),
                ((True,), {"warn_only": False})]
    for args, kwargs in settings:
        for module in MODULES:
            module.use_deterministic_algorithms(*args, **kwargs)
        assert _flags(mg) == _flags(torch)
    for mode in ("warn", "error", "default", 1, 2, 0, True):
        for module in MODULES:
            module.set_deterministic_debug_mode(mode)
        assert _flags(mg) == _flags(torch)


@pytest.mark.parametrize("args,kwargs", [
    ((1,), {}), (("x",), {}), ((None,), {}), ((True,), {"warn_only": 1}), ((), {})])
def test_use_deterministic_algorithms_refuses_what_torch_refuses(args, kwargs):
    with pytest.raises(TypeError) as theirs:
        torch.use_deterministic_algorithms(*args, **kwargs)
    with pytest.raises(TypeError) as ours:
        mg.use_deterministic_algorithms(*args, **kwargs)
    if args:
        assert str(ours.value) == str(theirs.value)
    assert _flags(mg) == (False, False, 0)


@pytest.mark.parametrize("mode,error", [("x", RuntimeError), (3, RuntimeError),
                                        (1.5, TypeError)])
def test_debug_mode_refuses_what_torch_refuses(mode, error):
    with pytest.raises(error) as theirs:
        torch.set_deterministic_debug_mode(mode)
    with pytest.raises(error) as ours:
        mg.set_deterministic_debug_mode(mode)
    assert str(ours.value) == str(theirs.value)
