"""torch.compile. mpigrad runs every op as it is called, so compiling changes nothing: a
module comes back wrapped as torch wraps it (OptimizedModule: `_orig_mod`, `_orig_mod.`
state_dict keys) and a function comes back as a function, both computing exactly what they
did. The arguments are checked as torch checks them, so a mistake in a `compile=True`
configuration is the error torch gives."""
import functools

from ._dynamo.eval_frame import OptimizedModule
from .nn.module import Module

_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,
            options=None, disable=False):
    if model is None:
        # @mpigrad.compile(mode=...) as a decorator
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic,
                                 backend=backend, mode=mode, options=options, disable=disable)
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(_MODES)}")
    if not (isinstance(backend, str) or callable(backend)):
        raise TypeError(f"backend must be a string or a callable, got {type(backend).__name__}")
    if not callable(model):
        raise RuntimeError("torch.compile can only compile a callable (a module or a "
                           f"function), got {type(model).__name__}")
    if disable:
        return model
    if isinstance(model, Module):
        return OptimizedModule(model, dict(fullgraph=fullgraph, dynamic=dynamic,
                                           backend=backend, mode=mode, options=options))

    @functools.wraps(model)
    def compiled(*args, **kwargs):
        return model(*args, **kwargs)
    compiled._torchdynamo_orig_callable = model
    return compiled
