"""torch._dynamo's names that training scripts touch. Nothing is traced here: compiled code is
the code itself, so these are the switches a script flips and the calls it makes, with
torch's meaning where one exists for code that is never compiled."""
import functools
import types

from .eval_frame import OptimizedModule  # noqa: F401

# Scripts set these (`torch._dynamo.config.suppress_errors = True` to fall back to eager on a
# compile error: here every run is eager).
config = types.SimpleNamespace(suppress_errors=False, cache_size_limit=8,
                               accumulated_cache_size_limit=256, verbose=False,
                               optimize_ddp=True, capture_scalar_outputs=False,
                               automatic_dynamic_shapes=True)


def reset():
    """Forget compiled code: there is none."""


def is_compiling():
    return False


def disable(fn=None, recursive=True, *, reason=None):
    """Run `fn` without compiling it: it already is. A decorator with or without arguments."""
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason)
    return fn


def list_backends(exclude_tags=("debug", "experimental")):
    return ["cudagraphs", "inductor", "onnxrt", "openxla", "tvm"]


def mark_dynamic(tensor, index, *, min=None, max=None):
    """Shapes are never specialised here, so every dimension is already dynamic."""


def mark_static(tensor, index=None):
    """Nothing is compiled, so nothing specialises on the shape."""


def allow_in_graph(fn):
    return fn
