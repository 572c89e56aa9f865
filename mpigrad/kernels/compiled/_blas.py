"""BLAS's gemm on blocks of row-major matrices, from compiled loops.

numba's np.dot multiplies whole contiguous matrices only, so a loop that wants one column
block of a product had each block multiplied into a work array of its own and copied into
place (the whole-loop LSTM: 0.34 ms of copies a layer on the word LM's forward). `gemm` takes
each operand as an array, an element offset and a row stride, as BLAS does, and writes the
block where it belongs. It calls the gemm numba's np.dot calls (scipy's BLAS, looked up by
numba's helper library by name), so the loops that use it are cached on disk as np.dot's
callers are. The helper's status is not read: it fails only when it cannot find scipy's
BLAS, and the callers load scipy's BLAS (which raises if it is missing) before a loop runs
(kernels/numpy/_compiled.py's load_blas).
"""
import numba
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

_CHAR = ir.IntType(8)
_VOID_P = ir.IntType(8).as_pointer()


@intrinsic
def gemm(typingctx, m, n, k, alpha, a, a_first, lda, a_transposed, b, b_first, ldb,
         b_transposed, beta, c, c_first, ldc):
    """C = alpha op(A) op(B) + beta C, in BLAS's order of arguments, for row-major blocks:
    op(A) is (m, k), op(B) (k, n) and C (m, n). Each operand is an array (each row
    contiguous, all three of one float dtype), the element its block starts at, counted from
    the array's first, and its row stride; A is read transposed when a_transposed (its block
    is then stored (k, m)), likewise B."""
    if not (isinstance(a, numba.types.Array) and a.dtype in (numba.float32, numba.float64)
            and b.dtype == a.dtype and c.dtype == a.dtype):
        return None
    kind = "s" if a.dtype == numba.float32 else "d"

    def codegen(context, builder, signature, values):
        (m, n, k, alpha, a_array, a_at, a_rows, a_t, b_array, b_at, b_rows, b_t, beta,
         c_array, c_at, c_rows) = values
        intp = context.get_value_type(numba.intp)

        def block(array_type, value, first):
            array = context.make_array(array_type)(context, builder, value)
            return builder.bitcast(builder.gep(array.data, [first]), _VOID_P)

        def slot(value):
            place = cgutils.alloca_once_value(builder, value)
            return builder.bitcast(place, _VOID_P)

        def operation(transposed):
            return builder.select(transposed, ir.Constant(_CHAR, ord("t")),
                                  ir.Constant(_CHAR, ord("n")))

        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.IntType(32), [_CHAR, _CHAR, _CHAR, intp, intp, intp, _VOID_P,
                                             _VOID_P, intp, _VOID_P, intp, _VOID_P, _VOID_P,
                                             intp]),
            "numba_xxgemm")
        # Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B's block first
        # (a row-major block read column-major is its transpose, so the flags carry over).
        builder.call(function, [ir.Constant(_CHAR, ord(kind)), operation(b_t), operation(a_t),
                                n, m, k, slot(alpha), block(b, b_array, b_at), b_rows,
                                block(a, a_array, a_at), a_rows, slot(beta),
                                block(c, c_array, c_at), c_rows])
        return context.get_dummy_value()

    intp, flag, scalar = numba.intp, numba.boolean, a.dtype
    return numba.types.none(intp, intp, intp, scalar, a, intp, intp, flag, b, intp, intp, flag,
                            scalar, c, intp, intp), codegen
