"""torch's deterministic-algorithms switch. mpigrad's CPU ops are deterministic already (no
atomics, fixed reduction orders; the collectives reduce in rank order), so the switch
changes no op: it is stored and read back, with torch's argument checks, so that scripts
which set it and code which asks it behave as under torch."""

__all__ = ["use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
           "get_deterministic_debug_mode"]

_state = {"mode": False, "warn_only": False}
_DEBUG_MODE_NAMES = ("default", "warn", "error")


def _check_bool(name, value, position=""):
    if type(value) is not bool:
        raise TypeError(f"_set_deterministic_algorithms(): argument '{name}'{position} must be "
                        f"bool, not {type(value).__name__}")


def use_deterministic_algorithms(mode, *, warn_only=False):
    _check_bool("mode", mode, " (position 1)")
    _check_bool("warn_only", warn_only)
    _state["mode"], _state["warn_only"] = mode, warn_only


def are_deterministic_algorithms_enabled():
    return _state["mode"]


def is_deterministic_algorithms_warn_only_enabled():
    return _state["warn_only"]


def set_deterministic_debug_mode(debug_mode):
    """0 / "default": off; 1 / "warn": on, warn only; 2 / "error": on."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODE_NAMES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, "
                               f"`warn`, `error`, but got {debug_mode}")
        debug_mode = _DEBUG_MODE_NAMES.index(debug_mode)
    elif not isinstance(debug_mode, int):
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got "
                           f"{debug_mode}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode():
    if not _state["mode"]:
        return 0
    return 1 if _state["warn_only"] else 2
