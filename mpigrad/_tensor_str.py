"""How a tensor prints: torch's layout and number formats, so that a program printing a tensor
prints what it prints on torch (`tensor([0.1000, 2.5000])`, `tensor(4.5000)`, `1.0000e-08`
where the magnitudes call for it, `...` past `threshold` elements, lines of `linewidth`).

Works on the storage array. The rules are torch's (torch/_tensor_str.py): one format for all
elements, chosen from the finite non-zero ones: scientific when the largest is over 1e8, the
ratio of largest to smallest over 1000 or the smallest under 1e-4 (or as sci_mode says), else
`3.` when every value is whole, else fixed with `precision` decimals. Each element is
right-aligned to the widest.
"""
import dataclasses
import math

import numpy as np

from . import dtypes


@dataclasses.dataclass
class _PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: object = None


PRINT_OPTS = _PrintOptions()
_PROFILES = {"default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
             "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
             "full": dict(precision=4, threshold=math.inf, edgeitems=3, linewidth=80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """torch.set_printoptions: a profile ('default', 'short', 'full') and single options on
    top of it; sci_mode is set every call (None: chosen per tensor), as in torch."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"Invalid profile: {profile}. the profile must be one of "
                             f"{', '.join(repr(p) for p in _PROFILES)}")
        for name, value in _PROFILES[profile].items():
            setattr(PRINT_OPTS, name, value)
    for name, value in (("precision", precision), ("threshold", threshold),
                        ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            setattr(PRINT_OPTS, name, value)
    PRINT_OPTS.sci_mode = sci_mode


class _Formatter:
    """One number format for every element of `values` (a float64, integer or bool array)."""

    def __init__(self, values):
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.ravel()
        if not self.floating:
            self.max_width = max([1] + [len(str(v)) for v in flat.tolist()])
        else:
            shown = flat[np.isfinite(flat) & (flat != 0)]
            if shown.size:
                self._choose_float_format(shown)

    def _choose_float_format(self, shown):
        magnitudes = np.abs(shown)
        smallest, largest = magnitudes.min(), magnitudes.max()
        self.int_mode = bool(np.all(shown == np.ceil(shown)))
        self.sci_mode = (largest / smallest > 1000.0 or largest > 1.0e8 or smallest < 1.0e-4
                         if PRINT_OPTS.sci_mode is None else PRINT_OPTS.sci_mode)
        values = shown.tolist()
        if self.sci_mode:
            self.max_width = max(len(f"{v:.{PRINT_OPTS.precision}e}") for v in values)
        elif self.int_mode:
            # A decimal point follows each whole number: one more character.
            self.max_width = max(len(f"{v:.0f}") + 1 for v in values)
        else:
            self.max_width = max(len(f"{v:.{PRINT_OPTS.precision}f}") for v in values)

    def format(self, value):
        if not self.floating:
            text = str(value)
        elif self.sci_mode:
            text = f"{value:{self.max_width}.{PRINT_OPTS.precision}e}"
        elif self.int_mode:
            text = f"{value:.0f}"
            if not (math.isinf(value) or math.isnan(value)):
                text += "."
        else:
            text = f"{value:.{PRINT_OPTS.precision}f}"
        return text.rjust(self.max_width)


def _summarized(array):
    """Only the `edgeitems` first and last entries along each dimension, as printed."""
    edge = PRINT_OPTS.edgeitems
    if array.ndim == 0:
        return array
    if not edge:
        return array[(slice(0, 0),) * array.ndim]
    if array.shape[0] > 2 * edge:
        array = np.concatenate([array[:edge], array[-edge:]])
    if array.ndim == 1:
        return array
    return np.stack([_summarized(row) for row in array])


class _Elements:
    """Formats an element: a real number, or a complex one as torch writes it (`1.+2.j`)."""

    def __init__(self, real, imag=None):
        self.real, self.imag = real, imag

    def width(self):
        return self.real.max_width + 2 + (0 if self.imag is None else self.imag.max_width + 1)

    def format(self, value):
        if self.imag is None:
            return self.real.format(value)
        imag = (self.imag.format(value.imag) + "j").lstrip()
        sign = "" if imag[0] in "+-" else "+"
        return self.real.format(value.real) + sign + imag


def _vector(array, indent, summarize, elements):
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / elements.width())))
    edge = PRINT_OPTS.edgeitems
    if summarize and not edge:
        data = ["..."]
    elif summarize and array.shape[0] > 2 * edge:
        data = ([elements.format(v) for v in array[:edge].tolist()] + [" ..."]
                + [elements.format(v) for v in array[-edge:].tolist()])
    else:
        data = [elements.format(v) for v in array.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(array, indent, summarize, elements):
    if array.ndim == 0:
        return elements.format(array.item())
    if array.ndim == 1:
        return _vector(array, indent, summarize, elements)
    edge = PRINT_OPTS.edgeitems
    if summarize and array.shape[0] > 2 * edge:
        rows = ([_nested(array[i], indent + 1, summarize, elements) for i in range(edge)]
                + ["..."]
                + [_nested(array[i], indent + 1, summarize, elements)
                   for i in range(len(array) - edge, len(array))])
    else:
        rows = [_nested(row, indent + 1, summarize, elements) for row in array]
    return "[" + ("," + "\n" * (array.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def _contents(array, indent):
    summarize = array.size > PRINT_OPTS.threshold
    if array.dtype in dtypes.HALF_PRECISION or array.dtype.kind == "f":
        array = array.astype(np.float64)
    shown = _summarized(array) if summarize else array
    if array.dtype.kind == "c":
        elements = _Elements(_Formatter(shown.real.astype(np.float64)),
                             _Formatter(shown.imag.astype(np.float64)))
    else:
        elements = _Elements(_Formatter(shown))
    return _nested(array, indent, summarize, elements)


def _with_suffixes(text, suffixes, indent):
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > PRINT_OPTS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    return "".join(parts) + ")"


def dtype_name(dtype):
    """The name torch prints for a dtype: torch.float32, torch.bfloat16, torch.int64 ..."""
    return f"torch.{np.dtype(dtype).name}"


def tensor_repr(array, grad_fn_name=None, requires_grad=False):
    """`tensor(...)` for a tensor with storage `array`, as torch prints it."""
    prefix = "tensor("
    default = dtypes.get_default_dtype()
    default_complex = dtypes.complex128 if default == dtypes.float64 else dtypes.complex64
    suffixes = []
    if array.size == 0:
        if array.ndim != 1:
            suffixes.append(f"size={tuple(array.shape)}")
        if array.dtype != default:
            suffixes.append(f"dtype={dtype_name(array.dtype)}")
        text = "[]"
    else:
        if array.dtype not in (default, default_complex, dtypes.int64, dtypes.bool):
            suffixes.append(f"dtype={dtype_name(array.dtype)}")
        text = _contents(array, len(prefix))
    if grad_fn_name is not None:
        suffixes.append(f"grad_fn=<{grad_fn_name}>")
    elif requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + text, suffixes, len(prefix))
