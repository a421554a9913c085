"""Swin Transformer (Liu et al. 2021), tiny, for small images.

Attention is computed inside non-overlapping windows of M x M patches, so cost grows linearly with image area; every
other block shifts the windows by M/2 (a cyclic roll plus a mask, so no padding is needed), letting information
cross window borders. Between stages, patch merging halves the grid and doubles the channels: a hierarchy like a CNN's.
"""
from dataclasses import dataclass

from .. import ops
from .. import nn


@dataclass
class SwinConfig:
    image_size: int = 32
    patch_size: int = 2
    in_chans: int = 1
    num_classes: int = 10
    embed_dim: int = 32
    depths: tuple = (2, 2)
    num_heads: tuple = (2, 4)
    window_size: int = 4
    mlp_ratio: int = 4


class SwinBlock(nn.Module):
    def __init__(self, dim, resolution, num_heads, window_size, shift, mlp_ratio=4):
        super().__init__()
        if window_size >= resolution:             # one window covers the map: nothing to shift
            window_size, shift = resolution, 0
        self.resolution, self.window_size, self.shift = resolution, window_size, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.WindowAttention(dim, window_size, num_heads)
        self.mlp = nn.MLP(dim, mlp_ratio * dim)
        mask = nn.shifted_window_mask(resolution, resolution, window_size, shift) if shift else None
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x, need_weights=False):
        """x (B, H*W, C) -> (B, H*W, C)."""
        b, n, c = x.shape
        r, w = self.resolution, self.window_size
        h = self.norm1(x).reshape(b, r, r, c)
        if self.shift:
            h = ops.roll(h, (-self.shift, -self.shift), (1, 2))
        h = nn.window_partition(h, w)
        h = self.attn(h, mask=self.mask, need_weights=need_weights)
        h = nn.window_reverse(h, w, r, r)
        if self.shift:
            h = ops.roll(h, (self.shift, self.shift), (1, 2))
        x = x + h.reshape(b, n, c)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """Concatenate each 2 x 2 group of neighbours (4C channels), normalise, project to 2C: half the resolution."""

    def __init__(self, resolution, dim):
        super().__init__()
        self.resolution = resolution
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        b, n, c = x.shape
        r = self.resolution
        x = x.reshape(b, r // 2, 2, r // 2, 2, c).permute(0, 1, 3, 4, 2, 5).reshape(b, (r // 2) ** 2, 4 * c)
        return self.reduction(self.norm(x))


class Swin(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.patch_embed = nn.PatchEmbed(config.image_size, config.patch_size, config.in_chans, config.embed_dim)
        resolution, dim = self.patch_embed.grid, config.embed_dim
        self.stages = nn.ModuleList()
        for i, (depth, heads) in enumerate(zip(config.depths, config.num_heads)):
            blocks = [SwinBlock(dim, resolution, heads, config.window_size,
                                shift=0 if j % 2 == 0 else config.window_size // 2, mlp_ratio=config.mlp_ratio)
                      for j in range(depth)]
            if i < len(config.depths) - 1:
                blocks.append(PatchMerging(resolution, dim))
                resolution, dim = resolution // 2, dim * 2
            self.stages.append(nn.ModuleList(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config.num_classes)

    def forward(self, images):
        x = self.patch_embed(images)
        for stage in self.stages:
            for block in stage:
                x = block(x)
        return self.head(self.norm(x).mean(dim=1))                   # global average pooling
