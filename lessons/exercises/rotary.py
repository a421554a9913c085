"""Exercise · rotary position embedding (RoPE).                     Lesson 07, the modern tweaks to the block.

RoPE (Su et al. 2021) rotates each pair of a query's (and key's) channels by an angle proportional to its
position: position m, pair i, angle m * theta_i with theta_i = base^(-2i/D). A rotation by m theta and one by
n theta meet in a dot product as a rotation by (m - n) theta, so q_m . k_n depends on the positions only through
m - n: relative position, and nothing added to the embeddings. Pairs are (i, i + D/2), as in GPT-NeoX, Hugging Face's
port of LLaMA and nn.RotaryEmbedding; the RoPE paper and Meta's original LLaMA code pair neighbours (2i, 2i + 1)
instead, the same rotation with the channels in another order (lesson 13 shows both).

Shapes
    rotary_tables(length, head_dim, offset=0, base=10000.0) -> cos, sin: NumPy float64 (length, head_dim) for
    positions offset .. offset + length - 1; columns i and i + D/2 hold the same angle.
    Rotate.forward(ctx, x, cos, sin): x (..., T, D), cos and sin (T, D); returns x's rotation, x's shape.

The math to derive
    1. For one pair (a, b) at angle t: (a cos t - b sin t, b cos t + a sin t). Show this is
       x * cos + rotate_half(x) * sin with rotate_half(x1, x2) = (-x2, x1) on the two halves of the last axis.
    2. The output is linear in x: y = C x + S R x with R = rotate_half. Its backward is dx = C g + R^T S g.
       What is R^T, in terms of R?
    3. Why is |y| = |x|, and why does q_m . k_n depend on the positions only through m - n?

Check it:    python -m lessons check rotary
"""
import numpy as np

from tinyattn import Function
from tinyattn.backend import xp_of


def rotary_tables(length, head_dim, offset=0, base=10000.0):
    # TODO: the angles position * theta_i, (length, head_dim / 2), each repeated for its pair; then cos and sin.
    raise NotImplementedError("not implemented yet")


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: each pair (a, b) becomes (-b, a), a quarter turn."""
    half = x.shape[-1] // 2
    return xp_of(x).concatenate([-x[..., half:], x[..., :half]], axis=-1)


class Rotate(Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        # TODO: rotate x; save what backward needs.
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: dx, with rotate_half; cos and sin get None.
        raise NotImplementedError("not implemented yet")
