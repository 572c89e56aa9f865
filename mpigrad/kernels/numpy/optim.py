"""The optimizers' updates as kernels of the numpy backend (kernels/compiled/optim.py): one
pass over each parameter, in place. Scalars are cast to the parameter's dtype here, so the
loop computes in that dtype."""
import numpy as np

from ._compiled import loops

_NONE = {}


def _flat(array):
    # Parameters, gradients and state are the optimizer's own contiguous arrays; a strided
    # one (a view handed to the optimizer) is updated through a contiguous copy.
    return array.reshape(-1) if array.flags.c_contiguous else None


def _in_place(update, arrays, scalars):
    if arrays[0].dtype not in (np.float32, np.float64):
        # float16 and bfloat16 parameters: the step computed in float32, stored back rounded
        wide = [a.astype(np.float32) for a in arrays]
        update(*[w.reshape(-1) for w in wide], *[np.float32(s) if isinstance(s, np.floating)
                                                 else s for s in scalars])
        for array, w in zip(arrays, wide):
            if array.size:
                array[...] = w
        return
    flat = [_flat(a) for a in arrays]
    copies = [a is None for a in flat]
    flat = [np.ascontiguousarray(a).reshape(-1) if f is None else f
            for a, f in zip(arrays, flat)]
    update(*flat, *scalars)
    for array, copied, f in zip(arrays, copies, flat):
        if copied:
            array[...] = f.reshape(array.shape)


def _empty(like):
    key = like.dtype
    if key not in _NONE:
        _NONE[key] = np.empty(0, like.dtype)
    return _NONE[key]


def _typed(param, *scalars):
    t = param.dtype.type
    return [t(s) for s in scalars]


def _optional(array, param):
    return _empty(param) if array is None else array


def _lerp_weights(beta1):
    """The first moment's lerp toward g: its weight 1 - beta1 and that weight's complement,
    as torch's lerp computes it (1 - weight)."""
    weight = 1 - beta1
    return weight, 1 - weight


def sgd_update(param, grad, buffer, lr, momentum, dampening, weight_decay, nesterov, maximize,
               first):
    """One SGD step on `param` in place (`buffer`, the momentum buffer, None without one)."""
    _in_place(loops("optim").sgd,
              [param, np.asarray(grad, param.dtype), _optional(buffer, param)],
              _typed(param, lr, momentum, 1 - dampening, weight_decay)
              + [bool(nesterov), bool(maximize), bool(first)])


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                bias_correction2_sqrt, beta1, beta2, eps, decay_factor, weight_decay,
                maximize):
    """One Adam(W) step on `param` and its state in place (`max_exp_avg_sq` None without
    amsgrad)."""
    _in_place(loops("optim").adam,
              [param, np.asarray(grad, param.dtype), exp_avg, exp_avg_sq,
               _optional(max_exp_avg_sq, param)],
              _typed(param, step_size, bias_correction2_sqrt, *_lerp_weights(beta1), beta2,
                     1 - beta2, eps, decay_factor, weight_decay) + [bool(maximize)])


def adagrad_update(param, grad, total, clr, weight_decay, eps, maximize):
    """One Adagrad step (`clr`, the lr decayed for this step) on `param` and `total`."""
    _in_place(loops("optim").adagrad, [param, np.asarray(grad, param.dtype), total],
              _typed(param, clr, weight_decay, eps) + [bool(maximize)])


def adadelta_update(param, grad, square_avg, acc_delta, lr, rho, eps, weight_decay, maximize):
    _in_place(loops("optim").adadelta,
              [param, np.asarray(grad, param.dtype), square_avg, acc_delta],
              _typed(param, lr, rho, 1 - rho, eps, weight_decay) + [bool(maximize)])


def rmsprop_update(param, grad, square_avg, grad_avg, buffer, lr, alpha, eps, weight_decay,
                   momentum, maximize):
    """One RMSprop step (`grad_avg` None unless centered, `buffer` None without momentum)."""
    _in_place(loops("optim").rmsprop,
              [param, np.asarray(grad, param.dtype), square_avg,
               _optional(grad_avg, param), _optional(buffer, param)],
              _typed(param, lr, alpha, 1 - alpha, eps, weight_decay, momentum)
              + [bool(maximize)])


def adamax_update(param, grad, exp_avg, exp_inf, clr, beta1, beta2, eps, weight_decay,
                  maximize):
    _in_place(loops("optim").adamax, [param, np.asarray(grad, param.dtype), exp_avg, exp_inf],
              _typed(param, clr, *_lerp_weights(beta1), beta2, eps, weight_decay)
              + [bool(maximize)])


def nadam_update(param, grad, exp_avg, exp_avg_sq, grad_scale, momentum_scale,
                 bias_correction2, beta1, beta2, eps, decay_factor, weight_decay, maximize):
    _in_place(loops("optim").nadam,
              [param, np.asarray(grad, param.dtype), exp_avg, exp_avg_sq],
              _typed(param, grad_scale, momentum_scale, bias_correction2, *_lerp_weights(beta1),
                     beta2, 1 - beta2, eps, decay_factor, weight_decay) + [bool(maximize)])


def radam_update(param, grad, exp_avg, exp_avg_sq, lr, bias_correction1,
                 bias_correction2_sqrt, rect, beta1, beta2, eps, decay_factor, weight_decay,
                 maximize):
    """One RAdam step; `rect` None while the adaptive step is off (rho_t <= 5)."""
    _in_place(loops("optim").radam,
              [param, np.asarray(grad, param.dtype), exp_avg, exp_avg_sq],
              _typed(param, lr, bias_correction1, bias_correction2_sqrt,
                     0 if rect is None else rect) + [rect is not None]
              + _typed(param, *_lerp_weights(beta1), beta2, 1 - beta2, eps, decay_factor,
                       weight_decay) + [bool(maximize)])
