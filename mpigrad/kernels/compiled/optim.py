"""The optimizers' updates, one pass over a parameter's arrays each: every element's whole
update (gradient, weight decay, running averages, step) while it is in registers.

Unlike the other loops these compute in the parameter's own dtype, with the scalars given in
that dtype by the caller, in the order and rounding of torch's single-tensor updates (and
of the numpy passes they replace): a step's rounding does not depend on the backend. (A
Python literal would widen float32 arithmetic to float64, hence every constant a parameter.)
All arrays are contiguous, 1-d and of one length.
"""
import math

from ._math import jit


@jit
def sgd(p, g, buffer, lr, momentum, dampening_complement, weight_decay, nesterov, maximize,
        first):
    """torch.optim.SGD: g = -g if maximize; g = weight_decay p + g; b = g on the first step
    else momentum b + (1 - dampening) g; g = g + momentum b (nesterov) or b; p -= lr g.
    `buffer` is empty without momentum."""
    with_momentum = buffer.size > 0
    for i in range(p.size):
        gi = -g[i] if maximize else g[i]
        if weight_decay != 0:
            gi = p[i] * weight_decay + gi
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


@jit
def adam(p, g, m, v, v_max, step_size, bias_correction2_sqrt, lerp_weight, lerp_complement,
         beta2, beta2_complement, eps, decay_factor, weight_decay, maximize):
    """torch.optim.Adam / AdamW: p *= decay_factor (decoupled weight decay, 1 otherwise);
    g = weight_decay p + g (coupled); m = lerp(m, g, 1 - beta1) in torch's rounding;
    v = beta2 v + (g (1 - beta2)) g; v_max = max(v_max, v) (amsgrad: v_max not empty);
    p -= (m / (sqrt(v or v_max) / bias_correction2_sqrt + eps)) step_size."""
    amsgrad = v_max.size > 0
    for i in range(p.size):
        pi = p[i] * decay_factor
        gi = -g[i] if maximize else g[i]
        if weight_decay != 0:
            gi = pi * weight_decay + gi
        mi = m[i]
        if lerp_weight < 0.5:
            mi = mi + (gi - mi) * lerp_weight
        else:
            mi = gi - (gi - mi) * lerp_complement
        m[i] = mi
        vi = v[i] * beta2 + gi * beta2_complement * gi
        v[i] = vi
        if amsgrad:
            vi = max(v_max[i], vi)
            v_max[i] = vi
        denom = math.sqrt(vi) / bias_correction2_sqrt + eps
        p[i] = pi - mi / denom * step_size
