"""Gradient clipping, as torch.nn.utils.clip_grad_norm_."""
import math

from .. import backend
from ..tensor import Tensor


def _parameters(parameters):
    """A single tensor counts as a list of one, as in PyTorch."""
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
    """Scale all gradients together so their joint norm is at most max_norm; returns the norm before clipping.

    The scale is min(1, max_norm / (norm + 1e-6)) applied always, so there is no host sync to decide whether to clip.
    """
    grads = [p.grad.array for p in _parameters(parameters) if p.grad is not None]
    if not grads:
        return Tensor(backend.numpy.zeros((), dtype=backend.float32))
    xp = backend.xp_of(grads[0])
    if norm_type == math.inf:
        total = xp.max(xp.stack([xp.abs(g).max() for g in grads]))
    else:
        total = xp.stack([(xp.abs(g) ** norm_type).sum() for g in grads]).sum() ** (1.0 / norm_type)
    scale = xp.minimum(max_norm / (total + 1e-6), 1.0).astype(grads[0].dtype)
    for g in grads:
        g *= scale
    return Tensor(total)


def clip_grad_value_(parameters, clip_value):
    """Clamp every gradient element into [-clip_value, clip_value], in place, as torch.nn.utils.clip_grad_value_."""
    for p in _parameters(parameters):
        if p.grad is not None:
            xp = backend.xp_of(p.grad.array)
            xp.clip(p.grad.array, -clip_value, clip_value, out=p.grad.array)
