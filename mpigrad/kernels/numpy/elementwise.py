"""The longer numpy kernels of ops/elementwise.py and ops/activations.py: erf, and relu and
leaky_relu both ways."""
import numpy as np

from ._compiled import compute_dtype, flat, loops, result


def relu(x):
    """float32 and float64 in one compiled pass (threaded under set_num_threads): ResNet's
    ReLUs read and write a few megabytes each. Other dtypes (integers, 16-bit floats) keep
    numpy's maximum, in their own dtype."""
    if x.dtype != np.float32 and x.dtype != np.float64:
        return np.maximum(x, 0)
    out = np.empty(x.shape, x.dtype)
    loops("elementwise").relu(flat(x), out.reshape(-1))
    return out


def relu_backward(needs, g, ans, x):
    """One compiled pass, where the rule's g * (ans > 0) took two passes and a boolean
    array."""
    work = compute_dtype(ans.dtype)
    out = np.empty(ans.shape, work)
    loops("elementwise").relu_backward(flat(g, work), flat(ans, work), out.reshape(-1))
    return (result(out, ans.dtype),)


def leaky_relu(x, negative_slope):
    """float32 and float64 in one compiled pass (a `where` of a comparison and a product was
    three passes and a boolean array: 2M float32 elements, 13 ms against torch's 1.1); other
    dtypes numpy's where."""
    slope = np.asarray(negative_slope, x.dtype)
    if x.dtype != np.float32 and x.dtype != np.float64:
        return np.where(x > 0, x, x * slope)
    out = np.empty(x.shape, x.dtype)
    loops("elementwise").leaky_relu(flat(x), slope[()], out.reshape(-1))
    return out


def _leaky_relu_backward(g, reference, negative_slope):
    work = compute_dtype(reference.dtype)
    out = np.empty(reference.shape, work)
    loops("elementwise").leaky_relu_backward(flat(g, work), flat(reference, work),
                                             work(negative_slope), out.reshape(-1))
    return (result(out, reference.dtype),)


def leaky_relu_backward(needs, g, ans, x, negative_slope):
    """The out-of-place op's gradient, read from the input."""
    return _leaky_relu_backward(g, x, negative_slope)


def leaky_relu_inplace_backward(needs, g, ans, x, negative_slope):
    """The in-place op's gradient, read from the output (the input is overwritten)."""
    return _leaky_relu_backward(g, ans, negative_slope)


# numpy has no erf, and GELU (every transformer's MLP) calls it on whole activations, so a
# Python call per element (math.erf) cost 50 ms per (16, 64, 512) call. These are the
# piecewise rational approximations of Sun's fdlibm (the coefficients are its published
# numbers; accurate to about 1 ulp in float64), evaluated region by region on arrays.
_ERF_SMALL = ((1.28379167095512558561e-01, -3.25042107247001499370e-01,
               -2.84817495755985104766e-02, -5.77027029648944159157e-03,
               -2.37630166566501626084e-05),
              (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
               5.08130628187576562776e-03, 1.32494738004321644526e-04,
               -3.96022827877536812320e-06))
_ERF_NEAR_ONE = ((-2.36211856075265944077e-03, 4.14856118683748331666e-01,
                  -3.72207876035701323847e-01, 3.18346619901161753674e-01,
                  -1.10894694282396677476e-01, 3.54783043256182359371e-02,
                  -2.16637559486879084300e-03),
                 (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
                  7.18286544141962662868e-02, 1.26171219808761642112e-01,
                  1.36370839120290507362e-02, 1.19844998467991074170e-02))
_ERFC_MIDDLE = ((-9.86494403484714822705e-03, -6.93858572707181764372e-01,
                 -1.05586262253232909814e+01, -6.23753324503260060396e+01,
                 -1.62396669462573470355e+02, -1.84605092906711035994e+02,
                 -8.12874355063065934246e+01, -9.81432934416914548592e+00),
                (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
                 4.34565877475229228821e+02, 6.45387271733267880336e+02,
                 4.29008140027567833386e+02, 1.08635005541779435134e+02,
                 6.57024977031928170135e+00, -6.04244152148580987438e-02))
_ERFC_TAIL = ((-9.86494292470009928597e-03, -7.99283237680523006574e-01,
               -1.77579549177547519889e+01, -1.60636384855821916062e+02,
               -6.37566443368389627722e+02, -1.02509513161107724954e+03,
               -4.83519191608651397019e+02),
              (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
               1.53672958608443695994e+03, 3.19985821950859553908e+03,
               2.55305040643316442583e+03, 4.74528541206955367215e+02,
               -2.24409524465858183362e+01))
_ERF_AT_ONE = 8.45062911510467529297e-01


def _horner(z, coefficients):
    """The polynomial with `coefficients` (lowest first) at z, in place: numpy's polyval
    allocates an array per coefficient, which made erf twice as slow."""
    out = z * coefficients[-1]
    out += coefficients[-2]
    for c in coefficients[-3::-1]:
        out *= z
        out += c
    return out


def _ratio(coefficients, z):
    numerator = _horner(z, coefficients[0])
    numerator /= _horner(z, coefficients[1])
    return numerator


def _erf_magnitude(a):
    """erf(a) for a = |x| >= 0 (float64 or float32). Every region's formula runs on the whole
    array and np.where picks: boolean gathers and scatters cost more than the arithmetic. Each
    formula sees its input clamped to its own region, because overflowing and denormal
    intermediates elsewhere would run several times slower."""
    inner = np.minimum(a, 1.25)
    small = inner + inner * _ratio(_ERF_SMALL, inner * inner)
    near_one = _ERF_AT_ONE + _ratio(_ERF_NEAR_ONE, inner - 1)
    outer = np.clip(a, 1.25, 6.0)
    inverse_square = 1 / (outer * outer)
    tail = _ratio(_ERFC_MIDDLE, inverse_square)
    np.copyto(tail, _ratio(_ERFC_TAIL, inverse_square), where=outer >= 1 / 0.35)
    # exp(-a*a) split as exp(-z*z) * exp((z - a)(z + a)), z = a with the low half of its
    # mantissa cleared, so z*z is exact and the product loses nothing.
    bits = np.uint64 if a.dtype == np.float64 else np.uint32
    z = (outer.view(bits) & bits(0xFFFFFFFF00000000 if bits is np.uint64 else 0xFFFFF000)
         ).view(a.dtype)
    tail += (z - outer) * (z + outer)
    out = 1 - np.exp(-z * z - 0.5625) * np.exp(tail) / outer
    # copyto with a mask: np.where's three-array select was the slowest step here.
    np.copyto(out, near_one, where=a < 1.25)
    np.copyto(out, small, where=a < 0.84375)
    np.copyto(out, 1, where=a >= 6)  # erf is 1 to working precision from there
    np.copyto(out, a, where=np.isnan(a))
    return out


def erf(x):
    # float32 (and float16) inputs are computed in float32: the approximations hold there to
    # a few ulps of float32, at half the memory traffic of float64.
    values = np.asarray(x, dtype=np.float64 if x.dtype == np.float64 else np.float32)
    return np.copysign(_erf_magnitude(np.abs(values)), values).astype(x.dtype, copy=False)
