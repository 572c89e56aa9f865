"""BLAS's gemm on blocks of row-major matrices, from compiled loops.

numba's np.dot multiplies whole contiguous matrices only, so a loop that wants one column
block of a product had each block multiplied into a work array of its own and copied into
place (the whole-loop LSTM: 0.34 ms of copies a layer on the word LM's forward). `gemm` takes
each operand as an array, an element offset and a row stride, as BLAS does, and writes the
block where it belongs. It calls the gemm numba's np.dot calls (scipy's BLAS, looked up by
numba's helper library by name), so the loops that use it are cached on disk as np.dot's
callers are. The helper's status is not read: it fails only when it cannot find scipy's
BLAS, and the callers import scipy.linalg.cython_blas (which raises if it is missing) before
a loop runs (kernels/numpy/recurrent.py's _load_products_blas).
"""
import numba
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

_CHAR = ir.IntType(8)
_VOID_P = ir.IntType(8).as_pointer()


@intrinsic
def gemm(typingctx, a, a_first, lda, b, b_first, ldb, c, c_first, ldc, m, n, k):
    """C = A B for the (m, k) block A of `a` starting at element a_first, rows lda elements
    apart (likewise the (k, n) block B of `b` and the (m, n) block C of `c`): arrays
    C-contiguous, of one float dtype."""
    if not (isinstance(a, numba.types.Array) and a.dtype in (numba.float32, numba.float64)
            and b.dtype == a.dtype and c.dtype == a.dtype):
        return None
    kind = "s" if a.dtype == numba.float32 else "d"

    def codegen(context, builder, signature, values):
        a_array, a_at, a_rows, b_array, b_at, b_rows, c_array, c_at, c_rows, m, n, k = values
        intp = context.get_value_type(numba.intp)

        def block(array_type, value, first):
            array = context.make_array(array_type)(context, builder, value)
            return builder.bitcast(builder.gep(array.data, [first]), _VOID_P)

        def slot(value):
            place = cgutils.alloca_once(builder, context.get_value_type(a.dtype))
            builder.store(context.get_constant(a.dtype, value), place)
            return builder.bitcast(place, _VOID_P)

        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.IntType(32), [_CHAR, _CHAR, _CHAR, intp, intp, intp, _VOID_P,
                                             _VOID_P, intp, _VOID_P, intp, _VOID_P, _VOID_P,
                                             intp]),
            "numba_xxgemm")
        no = ir.Constant(_CHAR, ord("n"))
        # Row-major C = A B is column-major C^T = B^T A^T: B's block first.
        builder.call(function, [ir.Constant(_CHAR, ord(kind)), no, no, n, m, k, slot(1.0),
                                block(b, b_array, b_at), b_rows, block(a, a_array, a_at),
                                a_rows, slot(0.0), block(c, c_array, c_at), c_rows])
        return context.get_dummy_value()

    return numba.types.none(a, numba.intp, numba.intp, b, numba.intp, numba.intp, c,
                            numba.intp, numba.intp, numba.intp, numba.intp,
                            numba.intp), codegen

