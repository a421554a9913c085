"""Position information: sinusoidal, learned, 2-D sin-cos for image patches, rotary (RoPE), Swin's relative
position bias, and resizing learned ViT position embeddings to a new grid.

Attention itself is blind to order (permuting the tokens permutes the output, tests/test_attention.py checks it);
everything here is a way of telling it where each token sits.
"""
import math

from .. import backend, ops
from ..tensor import Tensor, as_array
from .module import Module, Parameter
from .layers import _parameter
from . import init


def _xp():
    return backend.xp_for(backend.default_device())


def sinusoidal_table(length, dim, base=10000.0):
    """(length, dim) float32 tensor on the default device: even columns sin(pos / base^(2i/dim)), odd columns cos
    (Vaswani et al., 2017)."""
    xp = _xp()
    positions = xp.arange(length, dtype=backend.float64)[:, None]
    freqs = xp.exp(-math.log(base) * xp.arange(0, dim, 2, dtype=backend.float64) / dim)
    table = xp.zeros((length, dim))
    table[:, 0::2] = xp.sin(positions * freqs)
    table[:, 1::2] = xp.cos(positions * freqs[: dim // 2])
    return Tensor(table.astype(backend.float32))


def sincos_2d_table(grid_h, grid_w, dim):
    """(grid_h * grid_w, dim) tensor: half the channels encode the row, half the column, each a 1-D sinusoidal
    table."""
    if dim % 4:
        raise ValueError(f"2-D sin-cos embedding needs dim divisible by 4, got {dim}")
    xp = _xp()
    rows, cols = sinusoidal_table(grid_h, dim // 2).array, sinusoidal_table(grid_w, dim // 2).array
    return Tensor(xp.concatenate([xp.repeat(rows, grid_w, axis=0), xp.tile(cols, (grid_h, 1))], axis=1))


def position_rows(table, x, offset=0, position_ids=None):
    """The rows of a (max_len, D) table (an array, or a Tensor, which keeps its gradient) for the positions of
    x (..., T, D), shaped to broadcast against x: rows offset .. offset + T - 1, or the rows position_ids names,
    integers of shape (T,), or (B, T) with B x's first dim (each sequence of a batch at positions of its own, e.g.
    after left padding, as Hugging Face's models take position_ids)."""
    length, max_len, shape = x.shape[-2], table.shape[0], tuple(x.shape)
    if position_ids is None:
        if offset + length > max_len:
            raise ValueError(f"positions up to {offset + length} exceed max_len {max_len}")
        return table[offset:offset + length]
    positions = as_array(position_ids)
    if offset:
        raise ValueError(f"pass either offset ({offset}) or position_ids, not both: position_ids are absolute")
    if positions.dtype.kind not in "iu":
        raise TypeError(f"position_ids must be integers, got dtype {positions.dtype}")
    if positions.ndim not in (1, 2) or positions.shape[-1] != length or (
            positions.ndim == 2 and (len(shape) < 3 or positions.shape[0] not in (1, shape[0]))):
        raise ValueError(f"position_ids of shape {tuple(positions.shape)} do not fit x of shape {shape}: they need "
                         "(T,), or (B, T) with B x's first dim")
    if positions.size and not bool(((positions >= 0) & (positions < max_len)).all()):    # -1 would wrap around
        raise ValueError(f"position_ids must lie in 0 .. max_len - 1 = {max_len - 1}, got {int(positions.min())} .. "
                         f"{int(positions.max())}")
    rows = table[positions]
    if positions.ndim == 1:
        return rows
    return rows.reshape(rows.shape[:1] + (1,) * (len(shape) - 3) + tuple(rows.shape[1:]))   # (B, 1.., T, D)


class SinusoidalPositionalEncoding(Module):
    """Adds the fixed sinusoidal table to (B, T, D) inputs; offset shifts the positions (cached decoding)."""

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x, offset=0, position_ids=None):
        """x (B, T, d_model) at positions offset .. offset + T - 1, or at position_ids (T,) or (B, T)."""
        return x + Tensor(position_rows(self.pe.array, x, offset, position_ids).astype(x.dtype))


class LearnedPositionalEmbedding(Module):
    """A learned vector per position (GPT-2, ViT), initialised N(0, 0.02^2)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = init.normal_(_parameter(max_len, d_model), std=0.02)

    def forward(self, x, offset=0, position_ids=None):
        """x (B, T, d_model) at positions offset .. offset + T - 1, or at position_ids (T,) or (B, T)."""
        return x + position_rows(self.weight, x, offset, position_ids)


class RotaryEmbedding(Module):
    """RoPE (Su et al., 2021): rotate each pair of channels of q and k by an angle proportional to the position.

    Pair i turns by position * base^(-2i/head_dim). Which channels make pair i is a convention: by default
    (i, i + head_dim/2), as GPT-NeoX and Hugging Face's port of LLaMA (rotate_half); interleaved=True pairs neighbours
    (2i, 2i + 1), as the RoPE paper, GPT-J and Meta's original LLaMA code (the name and meaning of flash-attn's
    rotary flag). The two are the same rotation with the channels listed in another order (lesson 13). Either way
    q_m . k_n depends on the positions only through m - n: relative position enters through the dot product itself,
    and nothing is added to the token embeddings. base is Hugging Face's rope_theta (10000 in the paper; LLaMA 3 uses
    500000).
    """

    def __init__(self, head_dim, max_len=4096, base=10000.0, interleaved=False):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
        xp = _xp()
        self.head_dim, self.base, self.interleaved = head_dim, float(base), bool(interleaved)
        freqs = base ** (-xp.arange(0, head_dim, 2, dtype=backend.float64) / head_dim)
        angles = xp.arange(max_len, dtype=backend.float64)[:, None] * freqs[None, :]     # (max_len, pairs)
        # each angle on both channels of its pair: neighbours, or one in each half
        angles = xp.repeat(angles, 2, axis=1) if interleaved else xp.concatenate([angles, angles], axis=1)
        # Kept in float64 and cast per call, so a float64 model rotates exactly.
        self.register_buffer("cos", Tensor(xp.cos(angles)), persistent=False)
        self.register_buffer("sin", Tensor(xp.sin(angles)), persistent=False)

    def forward(self, x, offset=0, position_ids=None):
        """x (..., T, head_dim) at positions offset .. offset + T - 1, or at position_ids: integers of shape (T,), or
        (B, T) for x (B, ..., T, head_dim) (as Hugging Face's models take them: each sequence of the batch at
        positions of its own, e.g. after left padding)."""
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"rotary embedding of head_dim {self.head_dim} got x of shape {tuple(x.shape)}")
        cos, sin = (position_rows(table.array, x, offset, position_ids) for table in (self.cos, self.sin))
        # multiply each pair by i: (a, b) -> (-b, a), the pair's two channels side by side on axis `pair`
        half = self.head_dim // 2
        pair, split = (-1, (half, 2)) if self.interleaved else (-2, (2, half))
        first, second = x.reshape(tuple(x.shape[:-1]) + split).chunk(2, dim=pair)
        rotated = ops.cat([-second, first], dim=pair).reshape(x.shape)
        return x * Tensor(cos.astype(x.dtype)) + rotated * Tensor(sin.astype(x.dtype))

    def extra_repr(self):
        return f"head_dim={self.head_dim}, base={self.base}, interleaved={self.interleaved}"


def relative_position_index(window_h, window_w):
    """(N, N) integer tensor, N = window_h * window_w: for tokens a and b of a window, the row of the bias table
    that holds the bias for their offset (dy, dx), dy in [-(window_h-1), window_h-1], dx likewise (Swin, Liu et al.
    2021)."""
    xp = _xp()
    ys, xs = xp.meshgrid(xp.arange(window_h), xp.arange(window_w), indexing="ij")
    ys, xs = ys.reshape(-1), xs.reshape(-1)
    dy = ys[:, None] - ys[None, :] + window_h - 1
    dx = xs[:, None] - xs[None, :] + window_w - 1
    return Tensor(dy * (2 * window_w - 1) + dx)


class RelativePositionBias(Module):
    """Swin's learned bias B[h, a, b] = table[index[a, b], h]: one value per head per relative offset."""

    def __init__(self, window_size, num_heads):
        super().__init__()
        wh, ww = (window_size, window_size) if isinstance(window_size, int) else window_size
        self.num_heads, self.tokens = num_heads, wh * ww
        self.table = init.trunc_normal_(_parameter((2 * wh - 1) * (2 * ww - 1), num_heads), std=0.02)
        self.register_buffer("index", relative_position_index(wh, ww), persistent=False)

    def forward(self):
        n = self.tokens
        return self.table[self.index.array.reshape(-1)].reshape(n, n, self.num_heads).permute(2, 0, 1)


def _interpolation_matrix(new, old, xp):
    """(new, old) weights of linear interpolation with half-pixel centres (align_corners=False)."""
    centres = (xp.arange(new, dtype=backend.float64) + 0.5) * (old / new) - 0.5
    centres = xp.clip(centres, 0, old - 1)
    low = xp.floor(centres).astype(backend.int64)
    high = xp.minimum(low + 1, old - 1)
    frac = centres - low
    weights = xp.zeros((new, old))
    rows = xp.arange(new)
    backend.scatter_add(weights, (rows, low), 1 - frac)
    backend.scatter_add(weights, (rows, high), frac)
    return weights


def interpolate_pos_embed(pos_embed, old_grid, new_grid, num_prefix_tokens=0):
    """Resize learned patch position embeddings (1, prefix + oh*ow, D) to a new grid by bilinear interpolation,
    keeping prefix tokens (class, distillation) as they are: what lets a ViT run at a new image size."""
    (oh, ow), (nh, nw) = ((old_grid, old_grid) if isinstance(old_grid, int) else old_grid,
                          (new_grid, new_grid) if isinstance(new_grid, int) else new_grid)
    data = as_array(pos_embed)
    xp = backend.xp_of(data)
    prefix, grid = data[:, :num_prefix_tokens], data[:, num_prefix_tokens:]
    if grid.shape[1] != oh * ow:
        raise ValueError(f"{grid.shape[1]} patch embeddings do not form a {oh}x{ow} grid")
    grid = grid.reshape(oh, ow, -1).astype(backend.float64)
    rows, cols = _interpolation_matrix(nh, oh, xp), _interpolation_matrix(nw, ow, xp)
    resized = xp.einsum("ij,jkd,lk->ild", rows, grid, cols).reshape(1, nh * nw, -1).astype(data.dtype)
    return Parameter(xp.concatenate([prefix, resized], axis=1))
