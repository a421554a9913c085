"""Swin's attention inside windows (Liu et al. 2021): cutting a feature map into M x M windows and back, the mask
that keeps shifted windows from mixing regions the cyclic shift brought together, and multi-head attention inside
each window with a learned relative position bias."""
from .. import backend, ops
from .. import functional as F
from ..tensor import Tensor, as_array
from .layers import Linear
from .module import Module
from .position import RelativePositionBias


def window_partition(x, window_size):
    """(B, H, W, C) -> (B * nW, window_size^2, C): non-overlapping windows, row-major within and across windows."""
    b, h, w, c = x.shape
    if h % window_size or w % window_size:
        raise ValueError(f"feature map {h}x{w} is not a multiple of window_size {window_size}")
    x = x.reshape(b, h // window_size, window_size, w // window_size, window_size, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window_size * window_size, c)


def window_reverse(windows, window_size, h, w):
    """The inverse of window_partition: (B * nW, window_size^2, C) -> (B, H, W, C)."""
    c = windows.shape[-1]
    x = windows.reshape(-1, h // window_size, w // window_size, window_size, window_size, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


def shifted_window_mask(h, w, window_size, shift):
    """(nW, N, N) boolean tensor, True where two tokens of a window may attend to each other after the cyclic shift.

    Rolling the map by -shift brings pieces of the image that were not neighbours into one window. Label the map by
    the 3 x 3 regions the roll creates (cut at -window_size and -shift along each axis); tokens attend only within
    their own region.
    """
    xp = backend.xp_for(backend.default_device())
    regions = xp.zeros((h, w), dtype=backend.int64)
    label = 0
    for rows in (slice(0, -window_size), slice(-window_size, -shift), slice(-shift, None)):
        for cols in (slice(0, -window_size), slice(-window_size, -shift), slice(-shift, None)):
            regions[rows, cols] = label
            label += 1
    windows = window_partition(Tensor(regions[None, :, :, None]), window_size).array[..., 0]  # (nW, N)
    return Tensor(windows[:, :, None] == windows[:, None, :])


class WindowAttention(Module):
    """Multi-head self-attention inside each window, plus Swin's learned relative position bias."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.dim, self.window_size, self.num_heads = dim, window_size, num_heads
        self.qkv = Linear(dim, 3 * dim, qkv_bias)
        self.proj = Linear(dim, dim)
        self.relative_bias = RelativePositionBias(window_size, num_heads)
        self.last_weights = None

    def forward(self, windows, mask=None, need_weights=False):
        """windows (B * nW, N, C); mask (nW, N, N) boolean (True = may attend) from shifted_window_mask, or None."""
        bw, n, c = windows.shape
        if n != self.window_size ** 2 or c != self.dim:
            raise ValueError(f"WindowAttention(dim={self.dim}, window_size={self.window_size}) expects windows of "
                             f"shape (B * nW, {self.window_size ** 2}, {self.dim}), got {windows.shape}")
        hd = c // self.num_heads
        q, k, v = self.qkv(windows).reshape(bw, n, 3, self.num_heads, hd).permute(2, 0, 3, 1, 4).chunk(3, dim=0)
        q, k, v = q.squeeze(0), k.squeeze(0), v.squeeze(0)                       # (B * nW, H, N, hd)
        bias = self.relative_bias()                                               # (H, N, N), learned
        if mask is not None:
            n_windows = mask.shape[0]
            q, k, v = (t.reshape(bw // n_windows, n_windows, self.num_heads, n, hd) for t in (q, k, v))
            mask_data = as_array(mask)
            bias = ops.masked_fill(bias.unsqueeze(0), ~mask_data[:, None], float("-inf"))  # (nW, H, N, N)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        if need_weights:
            self.last_weights = F.attention_weights(q, k, attn_mask=bias.detach()).reshape(bw, self.num_heads, n, n)
        return self.proj(out.reshape(bw, self.num_heads, n, hd).transpose(1, 2).reshape(bw, n, c))
