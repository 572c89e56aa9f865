"""The LSTM step's fused gate arithmetic: nn.LSTM against torch's in float32 and float64
(odd sizes, a projection, two layers), gradients included."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402

from .torch_check import TOLERANCE  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("proj_size", [0, 3])
def test_lstm_matches_torch(proj_size, dtype):
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(5, 7, num_layers=2, proj_size=proj_size).to(
        torch.float64 if dtype == np.float64 else torch.float32)
    ours = mg.nn.LSTM(5, 7, num_layers=2, proj_size=proj_size).to(
        mg.float64 if dtype == np.float64 else mg.float32)
    ours.load_state_dict({k: mg.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((6, 3, 5)).astype(dtype) * 2
    m_x, t_x = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (m_out, (m_h, m_c)), (t_out, (t_h, t_c)) = ours(m_x), theirs(t_x)
    for a, b in ((m_out, t_out), (m_h, t_h), (m_c, t_c)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOLERANCE[dtype])
    (m_out.sum() + m_c.sum()).backward()
    (t_out.sum() + t_c.sum()).backward()
    np.testing.assert_allclose(m_x.grad.numpy(), t_x.grad.numpy(), **TOLERANCE[dtype])
    for name, parameter in theirs.named_parameters():
        np.testing.assert_allclose(dict(ours.named_parameters())[name].grad.numpy(),
                                   parameter.grad.numpy(), **TOLERANCE[dtype], err_msg=name)
