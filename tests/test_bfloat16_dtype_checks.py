"""bfloat16 (ml_dtypes, numpy kind "V") passes every "is this floating?" check, as torch's
bfloat16 does: those checks go through mpigrad.dtypes, not numpy's kind letter."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as torch_F  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy as TorchPolicy  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad.distributed.fsdp import MixedPrecisionPolicy  # noqa: E402
from mpigrad.utils.data import default_collate  # noqa: E402


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_mixed_precision_policy_takes_every_floating_dtype(name):
    ours = MixedPrecisionPolicy(param_dtype=getattr(mg, name), reduce_dtype=mg.float32)
    theirs = TorchPolicy(param_dtype=getattr(torch, name), reduce_dtype=torch.float32)
    assert ours.param_dtype == getattr(mg, name)
    assert str(theirs.param_dtype) == f"torch.{name}"


def test_mixed_precision_policy_refuses_an_integer_dtype():
    with pytest.raises(ValueError, match="floating"):
        MixedPrecisionPolicy(param_dtype=mg.int64)


@pytest.mark.parametrize("name", ["gelu", "silu"])
def test_activations_take_bfloat16_as_torch(name):
    values = np.linspace(-3, 3, 13)
    ours = getattr(F, name)(mg.tensor(values, dtype=mg.bfloat16))
    theirs = getattr(torch_F, name)(torch.tensor(values, dtype=torch.bfloat16))
    assert ours.dtype == mg.bfloat16
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=1e-2,
                               atol=1e-2)


def test_norms_take_bfloat16_as_torch():
    values = np.arange(12.0).reshape(3, 4) / 7
    ours = F.layer_norm(mg.tensor(values, dtype=mg.bfloat16), (4,))
    theirs = torch_F.layer_norm(torch.tensor(values, dtype=torch.bfloat16), (4,))
    assert ours.dtype == mg.bfloat16
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), atol=2e-2)
    ours = F.rms_norm(mg.tensor(values, dtype=mg.bfloat16), (4,))
    theirs = torch_F.rms_norm(torch.tensor(values, dtype=torch.bfloat16), (4,))
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), atol=2e-2)


def test_default_collate_stacks_bfloat16_arrays():
    bf16 = mg.tensor([0.0]).to(mg.bfloat16).numpy().dtype
    batch = default_collate([np.array([1.5, 2.0], dtype=bf16), np.array([3.0, 4.0], dtype=bf16)])
    assert batch.dtype == mg.bfloat16
    np.testing.assert_array_equal(batch.float().numpy(), [[1.5, 2.0], [3.0, 4.0]])
