"""Products beyond matmul: einsum, and torch's batched and fused matrix products.

einsum is one op over any number of operands. Its rules come from linearity: the tangent of
the result is the same contraction with one operand replaced by its tangent, and the gradient
of an operand is the contraction of the incoming gradient with all the other operands, written
as another einsum (so gradients of every order are einsums too). Two details make that exact
for every subscript string: a letter repeated within one operand (a diagonal, "ii->i") is
split into two letters joined by an identity matrix, and a letter that only that operand
carries (summed away, "ij->i") is restored by broadcasting.
"""
import string

import numpy as np

from ..dtypes import check_same_dtype, torch_name
from ..tensor import Tensor
from .arithmetic import matmul
from .core import Op, named
from .shape import expand, reshape

_LETTERS = string.ascii_letters


def _parse(equation, shapes):
    """(input subscripts, output subscripts), '...' replaced by explicit letters and the
    implicit output made explicit, as torch reads an equation."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation" if len(shapes) > len(inputs) else
                           "einsum(): fewer operands were provided than specified in the "
                           "equation")
    for term in inputs + ([rhs] if arrow else []):
        stray = set(term.replace("...", "")) - set(_LETTERS)
        if stray or term.count("...") > 1:
            raise RuntimeError(f"einsum(): invalid subscript given at index "
                               f"{equation.index(sorted(stray)[0]) if stray else 0} in the "
                               f"equation string, subscripts must be in [a-zA-Z]")
    used = set(equation)
    spare = [c for c in _LETTERS if c not in used]
    ellipsis_dims = 0
    for term, shape in zip(inputs, shapes):
        explicit = len(term.replace("...", ""))
        if "..." in term:
            ellipsis_dims = max(ellipsis_dims, len(shape) - explicit)
            if len(shape) < explicit:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                                   f"({explicit}) is more than the number of dimensions "
                                   f"({len(shape)}) for operand {inputs.index(term)}")
        elif explicit != len(shape):
            raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                               f"({explicit}) does not match the number of dimensions "
                               f"({len(shape)}) for operand {inputs.index(term)} and no "
                               "ellipsis was given")
    broadcast = "".join(spare[:ellipsis_dims])
    explicit_inputs = []
    for term, shape in zip(inputs, shapes):
        if "..." in term:
            own = len(shape) - len(term.replace("...", ""))
            term = term.replace("...", broadcast[ellipsis_dims - own:])
        explicit_inputs.append(term)
    if arrow:
        output = rhs.replace("...", broadcast)
        missing = set(output) - set("".join(explicit_inputs))
        if missing:
            raise RuntimeError(f"einsum(): output subscript {sorted(missing)[0]} does not "
                               "appear in the equation for any input operand")
        if len(set(output)) != len(output):
            raise RuntimeError("einsum(): output subscript appears more than once in the "
                               "output")
    else:
        counts = "".join(inputs).replace("...", "")
        output = broadcast + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    return explicit_inputs, output


def _sizes(inputs, shapes):
    sizes = {}
    for term, shape in zip(inputs, shapes):
        for letter, size in zip(term, shape):
            if sizes.get(letter, 1) != 1 and size not in (1, sizes[letter]):
                raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes "
                                   f"(original->remapped): subscript {letter} has sizes "
                                   f"{sizes[letter]} and {size}")
            sizes[letter] = max(size, sizes.get(letter, 1))
    return sizes


def _contract(inputs, output, *arrays):
    return np.einsum(f"{','.join(inputs)}->{output}", *arrays,
                     optimize="greedy" if len(arrays) > 1 else False)


def _operand_gradient(i, g, ans, *operands, inputs, output):
    term = inputs[i]
    sizes = _sizes(inputs, [o.shape for o in operands])
    spare = iter(c for c in _LETTERS if c not in set("".join(inputs)))
    # Split repeated letters: "ii" becomes "ij" with an identity linking i and j.
    distinct, identities = "", []
    for letter in term:
        if letter in distinct:
            fresh = next(spare)
            identities.append((letter + fresh, Tensor(np.eye(sizes[letter], dtype=g.dtype))))
            letter = fresh
        distinct += letter
    others = [(t, o) for j, (t, o) in enumerate(zip(inputs, operands)) if j != i]
    terms = [output] + [t for t, _ in others] + [t for t, _ in identities]
    known = set("".join(terms))
    reached = "".join(c for c in distinct if c in known)
    gradient = _einsum(g, *[o for _, o in others], *[e for _, e in identities],
                       inputs=tuple(terms), output=reached)
    if reached != distinct:
        # Letters only this operand carries were summed away: every element got g alike.
        kept = iter(gradient.shape)
        gradient = reshape(gradient, tuple(next(kept) if c in known else 1 for c in distinct))
        gradient = expand(gradient, tuple(sizes[c] for c in distinct))
    return gradient


def _operand_tangent(i, t, ans, *operands, inputs, output):
    return _einsum(*operands[:i], t, *operands[i + 1:], inputs=inputs, output=output)


_einsum = Op("einsum", lambda *arrays, inputs, output: _contract(inputs, output, *arrays),
             _operand_gradient, _operand_tangent, saves="*")


def einsum(equation, *operands):
    """torch.einsum: any subscript string torch accepts ('...', implicit output, repeated
    subscripts); operands may also be given as one list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    operands = [o if isinstance(o, Tensor) else Tensor(o) for o in operands]
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    inputs, output = _parse(equation, [o.shape for o in operands])
    _sizes(inputs, [o.shape for o in operands])
    return _einsum(*operands, inputs=tuple(inputs), output=output)


def _check_matrix_operands(first, second, dims):
    for label, operand in zip(("batch1", "batch2") if dims == 3 else ("mat1", "mat2"),
                              (first, second)):
        if operand.ndim != dims:
            raise RuntimeError(f"{label} must be a {dims}D tensor")
    check_same_dtype("expected scalar type {} but found {}", first, second)
    if dims == 3 and second.shape[:2] != (first.shape[0], first.shape[2]):
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{first.shape[0]}, {first.shape[2]}] but got: "
                           f"[{second.shape[0]}, {second.shape[1]}].")
    if dims == 2 and first.shape[1] != second.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({first.shape[0]}x"
                           f"{first.shape[1]} and {second.shape[0]}x{second.shape[1]})")


def bmm(input, mat2):
    """Batched matrix product of (b, n, m) and (b, m, p): no broadcasting, as torch."""
    _check_matrix_operands(input, mat2, 3)
    return named(matmul(input, mat2), "BmmBackward0", input, mat2)


def _scaled_sum(input, product, beta, alpha):
    # beta == 0 ignores input entirely (its NaNs and infs too), as torch documents.
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return expand(scaled, scaled.shape) * 1
    return scaled + (input if beta == 1 else input * beta)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * (batch1 @ batch2), batched; input broadcasts to the result."""
    _check_matrix_operands(batch1, batch2, 3)
    return named(_scaled_sum(input, matmul(batch1, batch2), beta, alpha), "BaddbmmBackward0",
                 input, batch1, batch2)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * (mat1 @ mat2); input broadcasts to the result."""
    _check_matrix_operands(mat1, mat2, 2)
    return named(_scaled_sum(input, matmul(mat1, mat2), beta, alpha), "AddmmBackward0", input,
                 mat1, mat2)


def outer(input, vec2):
    """The outer product of two vectors."""
    for operand in (input, vec2):
        if operand.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument self, but got {operand.ndim}-D"
                               if operand is input else
                               f"outer: Expected 1-D argument vec2, but got {operand.ndim}-D")
    return reshape(input, (-1, 1)) * vec2


ger = outer


def dot(a, b):
    """The inner product of two 1-d tensors of one dtype and size."""
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.dtype != b.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{torch_name(a.dtype)} and {torch_name(b.dtype)}")
    if a.shape != b.shape:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src "
                           f"[{b.shape[0]}] to have the same number of elements, but got "
                           f"{a.shape[0]} and {b.shape[0]} elements respectively")
    return matmul(a, b)  # named DotBackward0 there


def mv(matrix, vector):
    """A matrix times a vector."""
    if matrix.ndim != 2 or vector.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {matrix.ndim}, "
                           f"{vector.ndim}")
    if matrix.shape[1] != vector.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({matrix.shape[0]}), mat "
                           f"({matrix.shape[0]}x{matrix.shape[1]}), vec ({vector.shape[0]})")
    check_same_dtype("expected m1 and m2 to have the same dtype, but got: {} != {}", matrix,
                     vector)
    return matmul(matrix, vector)  # named MvBackward0 there
