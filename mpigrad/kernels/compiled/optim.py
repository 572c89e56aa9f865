"""The optimizers' updates, one pass over a parameter's arrays each: every element's whole
update (gradient, weight decay, running averages, step) while it is in registers.

Unlike the other loops these compute in the parameter's own dtype, with the scalars given in
that dtype by the caller, in the order and rounding of torch's single-tensor updates (and
of the numpy passes they replace): a step's rounding does not depend on the backend. (A
Python literal would widen float32 arithmetic to float64, hence every constant a parameter.)
All arrays are contiguous, 1-d and of one length; threads take elements (see _threads.py),
each updated as on one thread.
"""
import math

from numba import prange

from ._math import jit
from ._threads import parallel


@jit
def _regularized(p, g, weight_decay, maximize):
    """The gradient a step descends: negated to maximize, plus weight_decay p (torch's
    grad.add(param, alpha=weight_decay), which rounds as p weight_decay + g)."""
    g = -g if maximize else g
    return p * weight_decay + g if weight_decay != 0 else g


@jit
def _lerp(start, end, weight, complement):
    # torch's lerp: from start for a small weight, back from end otherwise
    return start + (end - start) * weight if weight < 0.5 else end - (end - start) * complement


@jit
def _adam_moments(m, v, i, gi, lerp_weight, lerp_complement, beta2, beta2_complement):
    mi = _lerp(m[i], gi, lerp_weight, lerp_complement)
    m[i] = mi
    vi = v[i] * beta2 + gi * beta2_complement * gi
    v[i] = vi
    return mi, vi


@parallel(rows=("p", "g", "buffer"))
def sgd(p, g, buffer, lr, momentum, dampening_complement, weight_decay, nesterov, maximize,
        first):
    """torch.optim.SGD: g = -g if maximize; g = weight_decay p + g; b = g on the first step
    else momentum b + (1 - dampening) g; g = g + momentum b (nesterov) or b; p -= lr g.
    `buffer` is empty without momentum."""
    with_momentum = buffer.size > 0
    for i in prange(p.size):
        gi = _regularized(p[i], g[i], weight_decay, maximize)
        if with_momentum:
            if first:
                b = gi
            elif dampening_complement == 1:
                b = buffer[i] * momentum + gi
            else:
                b = buffer[i] * momentum + gi * dampening_complement
            buffer[i] = b
            gi = gi + b * momentum if nesterov else b
        p[i] = p[i] - gi * lr


@parallel(rows=("p", "g", "m", "v", "v_max"))
def adam(p, g, m, v, v_max, step_size, bias_correction2_sqrt, lerp_weight, lerp_complement,
         beta2, beta2_complement, eps, decay_factor, weight_decay, maximize):
    """torch.optim.Adam / AdamW: p *= decay_factor (decoupled weight decay, 1 otherwise);
    g = weight_decay p + g (coupled); m = lerp(m, g, 1 - beta1) in torch's rounding;
    v = beta2 v + (g (1 - beta2)) g; v_max = max(v_max, v) (amsgrad: v_max not empty);
    p -= (m / (sqrt(v or v_max) / bias_correction2_sqrt + eps)) step_size."""
    amsgrad = v_max.size > 0
    for i in prange(p.size):
        pi = p[i] * decay_factor
        gi = _regularized(pi, g[i], weight_decay, maximize)
        mi, vi = _adam_moments(m, v, i, gi, lerp_weight, lerp_complement, beta2,
                               beta2_complement)
        if amsgrad:
            vi = max(v_max[i], vi)
            v_max[i] = vi
        denom = math.sqrt(vi) / bias_correction2_sqrt + eps
        p[i] = pi - mi / denom * step_size


@parallel(rows=("p", "g", "total"))
def adagrad(p, g, total, clr, weight_decay, eps, maximize):
    """torch.optim.Adagrad: s += g g; p -= clr g / (sqrt(s) + eps), clr the decayed lr
    (as addcdiv_(g, std, value=-clr): (-clr g) / std)."""
    for i in prange(p.size):
        gi = _regularized(p[i], g[i], weight_decay, maximize)
        s = total[i] + gi * gi
        total[i] = s
        p[i] = p[i] + gi * -clr / (math.sqrt(s) + eps)


@parallel(rows=("p", "g", "square_avg", "acc_delta"))
def adadelta(p, g, square_avg, acc_delta, lr, rho, rho_complement, eps, weight_decay,
             maximize):
    """torch.optim.Adadelta: v = rho v + (1 - rho) g g; delta = sqrt(u + eps) / sqrt(v + eps)
    g; u = rho u + (1 - rho) delta delta; p -= lr delta."""
    for i in prange(p.size):
        gi = _regularized(p[i], g[i], weight_decay, maximize)
        v = square_avg[i] * rho + gi * rho_complement * gi
        square_avg[i] = v
        delta = math.sqrt(acc_delta[i] + eps) / math.sqrt(v + eps) * gi
        acc_delta[i] = acc_delta[i] * rho + delta * rho_complement * delta
        p[i] = p[i] - delta * lr


@parallel(rows=("p", "g", "square_avg", "grad_avg", "buffer"))
def rmsprop(p, g, square_avg, grad_avg, buffer, lr, alpha, alpha_complement, eps,
            weight_decay, momentum, maximize):
    """torch.optim.RMSprop: v = alpha v + (1 - alpha) g g; a = lerp(a, g, 1 - alpha) and
    d = sqrt(v - a a) + eps when centered (`grad_avg` not empty), else sqrt(v) + eps;
    b = momentum b + g / d, p -= lr b with momentum (`buffer` not empty), else
    p -= lr g / d."""
    centered = grad_avg.size > 0
    with_momentum = buffer.size > 0
    for i in prange(p.size):
        gi = _regularized(p[i], g[i], weight_decay, maximize)
        v = square_avg[i] * alpha + gi * alpha_complement * gi
        square_avg[i] = v
        if centered:
            a = _lerp(grad_avg[i], gi, alpha_complement, alpha)
            grad_avg[i] = a
            v = v - a * a  # torch's addcmul(a, a, value=-1), exactly
        avg = math.sqrt(v) + eps
        if with_momentum:
            b = buffer[i] * momentum + gi / avg
            buffer[i] = b
            p[i] = p[i] + b * -lr
        else:
            p[i] = p[i] + gi * -lr / avg


@parallel(rows=("p", "g", "m", "u"))
def adamax(p, g, m, u, clr, lerp_weight, lerp_complement, beta2, eps, weight_decay,
           maximize):
    """torch.optim.Adamax: m = lerp(m, g, 1 - beta1); u = max(beta2 u, |g| + eps);
    p -= clr m / u, clr = lr / (1 - beta1^t)."""
    for i in prange(p.size):
        gi = _regularized(p[i], g[i], weight_decay, maximize)
        mi = _lerp(m[i], gi, lerp_weight, lerp_complement)
        m[i] = mi
        ui = u[i] * beta2
        bound = abs(gi) + eps
        ui = bound if bound > ui or bound != bound else ui
        u[i] = ui
        p[i] = p[i] - mi / ui * clr


@parallel(rows=("p", "g", "m", "v"))
def nadam(p, g, m, v, grad_scale, momentum_scale, bias_correction2, lerp_weight,
          lerp_complement, beta2, beta2_complement, eps, decay_factor, weight_decay,
          maximize):
    """torch.optim.NAdam: Adam's moments, d = sqrt(v / (1 - beta2^t)) + eps, then
    p += grad_scale g / d and p += momentum_scale m / d (each scale carries -lr and the
    mu products; decoupled decay as Adam's `decay_factor`)."""
    for i in prange(p.size):
        pi = p[i] * decay_factor
        gi = _regularized(pi, g[i], weight_decay, maximize)
        mi, vi = _adam_moments(m, v, i, gi, lerp_weight, lerp_complement, beta2,
                               beta2_complement)
        denom = math.sqrt(vi / bias_correction2) + eps
        pi = pi + gi / denom * grad_scale
        p[i] = pi + mi / denom * momentum_scale


@parallel(rows=("p", "g", "m", "v"))
def radam(p, g, m, v, lr, bias_correction1, bias_correction2_sqrt, rect, rectified,
          lerp_weight, lerp_complement, beta2, beta2_complement, eps, decay_factor,
          weight_decay, maximize):
    """torch.optim.RAdam: Adam's moments; the step (m / (1 - beta1^t)) lr, times
    sqrt(1 - beta2^t) / (sqrt(v) + eps) and `rect` once `rectified` (rho_t > 5)."""
    for i in prange(p.size):
        pi = p[i] * decay_factor
        gi = _regularized(pi, g[i], weight_decay, maximize)
        mi, vi = _adam_moments(m, v, i, gi, lerp_weight, lerp_complement, beta2,
                               beta2_complement)
        update = mi / bias_correction1 * lr
        if rectified:
            update = update * (bias_correction2_sqrt / (math.sqrt(vi) + eps)) * rect
        p[i] = pi - update
