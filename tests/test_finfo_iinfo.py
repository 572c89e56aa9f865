"""mpigrad.finfo / mpigrad.iinfo: torch's fields, values, types and errors."""
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402

FLOAT_FIELDS = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "complex64",
                                  "complex128"])
def test_finfo_is_torchs(name):
    ours, theirs = mg.finfo(getattr(mg, name)), torch.finfo(getattr(torch, name))
    for field in FLOAT_FIELDS:
        assert getattr(ours, field) == getattr(theirs, field), field
        assert type(getattr(ours, field)) is type(getattr(theirs, field)), field
    assert repr(ours) == repr(theirs)


def test_finfo_without_argument_follows_the_default_dtype():
    assert mg.finfo().dtype == torch.finfo().dtype == "float32"
    mg.set_default_dtype(mg.float64)
    try:
        assert mg.finfo().eps == torch.finfo(torch.float64).eps
    finally:
        mg.set_default_dtype(mg.float32)


@pytest.mark.parametrize("name", ["uint8", "int8", "int16", "int32", "int64"])
def test_iinfo_is_torchs(name):
    ours, theirs = mg.iinfo(getattr(mg, name)), torch.iinfo(getattr(torch, name))
    for field in ("bits", "max", "min", "dtype"):
        assert getattr(ours, field) == getattr(theirs, field), field
        assert type(getattr(ours, field)) is type(getattr(theirs, field)), field
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("call,argument", [
    ("finfo", "int32"), ("iinfo", "float32"), ("iinfo", "bool"), ("finfo", "bool")])
def test_wrong_kind_of_dtype_is_torchs_type_error(call, argument):
    with pytest.raises(TypeError) as theirs:
        getattr(torch, call)(getattr(torch, argument))
    with pytest.raises(TypeError, match=str(theirs.value).split(".")[0].replace("(", r"\(")
                       .replace(")", r"\)")):
        getattr(mg, call)(getattr(mg, argument))


def test_a_string_is_not_a_dtype_nor_is_iinfo_without_one():
    for module in (torch, mg):
        with pytest.raises(TypeError, match="must be torch.dtype, not str"):
            module.finfo("float32")
        with pytest.raises(TypeError):
            module.iinfo()
