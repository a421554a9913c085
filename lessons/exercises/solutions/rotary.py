"""Solution · rotary position embedding (lesson 07)."""
import numpy as np

from tinyattn import Function
from tinyattn.backend import xp_of


def rotary_tables(length, head_dim, offset=0, base=10000.0):
    frequencies = base ** (-np.arange(0, head_dim, 2) / head_dim)                 # (head_dim / 2,)
    angles = np.arange(offset, offset + length)[:, None] * frequencies[None, :]   # position * frequency
    angles = np.concatenate([angles, angles], axis=1)                             # pair i and i + head_dim/2 share one
    return np.cos(angles), np.sin(angles)


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: each pair (a, b) becomes (-b, a), a quarter turn."""
    half = x.shape[-1] // 2
    return xp_of(x).concatenate([-x[..., half:], x[..., :half]], axis=-1)


class Rotate(Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return x * cos + rotate_half(x) * sin

    @staticmethod
    def backward(ctx, grad):
        # y = x cos + R x sin with R the fixed map rotate_half, so dx = grad cos + R^T (grad sin); R^T = -R,
        # since rotating a pair by +90 degrees is undone by rotating it by -90.
        cos, sin = ctx.saved_tensors
        return grad * cos - rotate_half(grad * sin), None, None
