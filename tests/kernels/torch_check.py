"""One comparison of a fused op with torch: forward, gradients (create_graph=False, the fused
backward) and tangents (forward mode, the rules), float64 to 1e-10 and float32 within torch's
own float32 tolerance; and the same result twice."""
import numpy as np
import torch

import mpigrad as mg

TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-10),
             np.float32: dict(rtol=1.3e-6, atol=1e-5)}  # torch.testing's float32 defaults


def _close(ours, theirs, dtype, what):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    ours = ours.detach().numpy() if isinstance(ours, mg.Tensor) else np.asarray(ours)
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype}, torch's {theirs.dtype}"
    np.testing.assert_allclose(ours, theirs, err_msg=what, **TOLERANCE[dtype])


def check(ours, theirs, arrays, dtype, differentiable=None, seed=0):
    """`ours(*tensors)` and `theirs(*tensors)` on `arrays` (cast to dtype where floating);
    `differentiable` says which inputs get gradients and tangents (all floating ones by
    default). Returns mpigrad's output and gradients."""
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    if differentiable is None:
        differentiable = [a.dtype.kind == "f" for a in arrays]
    rng = np.random.default_rng(seed)
    m_in = [mg.tensor(a, requires_grad=d) for a, d in zip(arrays, differentiable)]
    t_in = [torch.tensor(a, requires_grad=d) for a, d in zip(arrays, differentiable)]
    m_out, t_out = ours(*m_in), theirs(*t_in)
    _close(m_out, t_out, dtype, "forward")
    seed_grad = rng.standard_normal(t_out.shape).astype(dtype)
    m_grads = mg.autograd.grad(m_out, [t for t, d in zip(m_in, differentiable) if d],
                               mg.tensor(seed_grad))
    t_grads = torch.autograd.grad(t_out, [t for t, d in zip(t_in, differentiable) if d],
                                  torch.tensor(seed_grad))
    for i, (mgr, tgr) in enumerate(zip(m_grads, t_grads)):
        _close(mgr, tgr, dtype, f"gradient of input {i}")
    again = mg.autograd.grad(ours(*m_in), [t for t, d in zip(m_in, differentiable) if d],
                             mg.tensor(seed_grad))
    for first, second in zip(m_grads, again):
        np.testing.assert_array_equal(first.numpy(), second.numpy())
    np.testing.assert_array_equal(ours(*m_in).detach().numpy(), m_out.detach().numpy())
    if dtype == np.float64:
        tangents = [rng.standard_normal(a.shape) for a, d in zip(arrays, differentiable) if d]
        _check_tangent(ours, theirs, arrays, differentiable, tangents, dtype)
    return m_out, m_grads


def _check_tangent(ours, theirs, arrays, differentiable, tangents, dtype):
    def bind(fn, lib):
        def only_differentiable(*moving):
            moving = iter(moving)
            return fn(*[next(moving) if d else lib.tensor(a)
                        for a, d in zip(arrays, differentiable)])
        return only_differentiable
    primals = [a for a, d in zip(arrays, differentiable) if d]
    _, m_tangent = mg.func.jvp(bind(ours, mg), tuple(mg.tensor(p) for p in primals),
                               tuple(mg.tensor(t) for t in tangents))
    _, t_tangent = torch.func.jvp(bind(theirs, torch), tuple(torch.tensor(p) for p in primals),
                                  tuple(torch.tensor(t) for t in tangents))
    _close(m_tangent, t_tangent, dtype, "tangent")
