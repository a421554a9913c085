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


class SinusoidalPositionalEncoding(Module):
    """Adds the fixed sinusoidal table to (B, T, D) inputs; offset shifts the positions (cached decoding)."""

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x, offset=0):
        if offset + x.shape[1] > self.pe.shape[0]:
            raise ValueError(f"sequence of {offset + x.shape[1]} positions exceeds max_len {self.pe.shape[0]}")
        return x + Tensor(self.pe.array[offset:offset + x.shape[1]].astype(x.dtype))


class LearnedPositionalEmbedding(Module):
    """A learned vector per position (GPT-2, ViT), initialised N(0, 0.02^2)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = init.normal_(_parameter(max_len, d_model), std=0.02)

    def forward(self, x, offset=0):
        if offset + x.shape[1] > self.weight.shape[0]:
            raise ValueError(f"sequence of {offset + x.shape[1]} positions exceeds max_len {self.weight.shape[0]}")
        return x + self.weight[offset:offset + x.shape[1]]


class RotaryEmbedding(Module):
    """RoPE (Su et al., 2021): rotate each pair of channels of q and k by an angle proportional to the position.

    Pairs are (i, i + head_dim/2) as in GPT-NeoX and Hugging Face's port of LLaMA (rotate_half); the paper and Meta's
    original LLaMA code pair neighbours (2i, 2i + 1), the same rotation with the channels in another order. Then
    q_m . k_n depends on the positions only through m - n: relative position enters through the dot product itself,
    and nothing is added to the token embeddings.
    """

    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
        xp = _xp()
        freqs = base ** (-xp.arange(0, head_dim, 2, dtype=backend.float64) / head_dim)
        angles = xp.arange(max_len, dtype=backend.float64)[:, None] * freqs[None, :]
        angles = xp.concatenate([angles, angles], axis=1)                 # (max_len, head_dim)
        # Kept in float64 and cast per call, so a float64 model rotates exactly.
        self.register_buffer("cos", Tensor(xp.cos(angles)), persistent=False)
        self.register_buffer("sin", Tensor(xp.sin(angles)), persistent=False)

    def forward(self, x, offset=0):
        """x (..., T, head_dim) at positions offset .. offset + T - 1."""
        length = x.shape[-2]
        if offset + length > self.cos.shape[0]:
            raise ValueError(f"positions up to {offset + length} exceed max_len {self.cos.shape[0]}")
        cos = Tensor(self.cos.array[offset:offset + length].astype(x.dtype))
        sin = Tensor(self.sin.array[offset:offset + length].astype(x.dtype))
        first, second = x.chunk(2, dim=-1)
        rotated = ops.cat([-second, first], dim=-1)                       # multiply each pair by i
        return x * cos + rotated * sin


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
