"""torch.func's forward-mode pair: `jvp` and `jacfwd`, on mpigrad's dual tensors.

Both are eager (no vmap): `jacfwd` runs one forward pass per element of the argument, each
pushing one basis tangent. func may take gradients itself (jvp of a gradient is a
Hessian-vector product); results carry no reverse-mode graph (for a differentiable J v use
`mpigrad.autograd.functional.jvp(..., create_graph=True)`).
"""
from .autograd.functional import forward_jacobian, forward_jvp
from .tensor import Tensor

__all__ = ["jvp", "jacfwd"]


def _with_aux(func, has_aux, aux):
    """func, with its auxiliary output (when it returns (output, aux)) moved into `aux`."""
    if not has_aux:
        return func

    def run(*args):
        result = func(*args)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise RuntimeError("has_aux=True: func must return a pair (output, aux), got "
                               f"{type(result).__name__}")
        aux.append(result[1])
        return result[0]
    return run


def _detached(values, was_tuple):
    values = tuple(v.detach() for v in values)
    return values if was_tuple else values[0]


def _detach_nested(value):
    """aux as torch.func returns it: its tensors cut from the graph func recorded."""
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detach_nested(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach_nested(v) for k, v in value.items()}
    return value


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), J tangents), plus aux when `has_aux`; primals and tangents are tuples."""
    for name, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, tuple) or not all(isinstance(v, Tensor) for v in value):
            raise RuntimeError(f"jvp(f, primals, tangents): expected {name} to be a tuple of "
                               f"tensors, got {type(value).__name__}; e.g. jvp(f, (x,), (t,))")
    aux = []
    outputs, jv, was_tuple = forward_jvp(_with_aux(func, has_aux, aux), primals, tangents)
    result = (_detached(outputs, was_tuple), _detached(jv, was_tuple))
    return result + (_detach_nested(aux[0]),) if has_aux else result


def jacfwd(func, argnums=0, has_aux=False):
    """A function returning the Jacobian of `func` with respect to the arguments `argnums`
    (an int or a tuple of them), of shape output.shape + argument.shape, computed by forward
    mode. Nested as torch's: outputs outer, arguments inner."""
    single_arg = isinstance(argnums, int)
    positions = (argnums,) if single_arg else tuple(argnums)

    def jacobian(*args):
        aux = []
        run = _with_aux(func, has_aux, aux)
        per_arg = [forward_jacobian(run, args, position) for position in positions]
        was_tuple = per_arg[0][1]
        per_output = tuple(zip(*(jac for jac, _ in per_arg)))
        jac = tuple(j[0] if single_arg else j for j in per_output)
        jac = jac if was_tuple else jac[0]
        return (jac, _detach_nested(aux[0])) if has_aux else jac
    return jacobian
