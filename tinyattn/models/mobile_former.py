"""Mobile-Former (Chen et al. 2022), tiny, for small images: a convolutional branch (Mobile) and a few global tokens
(Former) side by side, talking both ways through cross-attention.

Mobile sees pixels and their neighbours; Former is a Transformer over M tokens only (M = 4 here, at most 6 in the
paper), so its self-attention costs M^2 instead of (H W)^2. Each block:

    z = z + Mobile->Former(x, z)    the tokens attend over the pixels of the feature map: queries from the tokens,
                                    keys and values are the pixels' channels themselves (no projections on the map side)
    z = Former(z)                   self-attention among the tokens, then an MLP (pre-norm Transformer block)
    x = Mobile(x)                   a 3 x 3 convolution and ReLU (the paper: a MobileNet bottleneck whose dynamic ReLU
                                    is set by the tokens; a plain ReLU here)
    x = x + Former->Mobile(x, z)    every pixel attends over the tokens: the pixel's channels are the query itself,
                                    keys and values are projections of the tokens

Cross-attention between H W pixels and M tokens costs H W M per channel each way, linear in the image's area. The
classifier reads the averaged feature map only (the paper's also reads the first token), so whatever the tokens add
reaches it through Former->Mobile. The convolutional branch is exactly SmallCNN (models/cnn.py), and Former->Mobile
starts at 0: at initialisation the network computes what that CNN computes, which makes the CNN the control.
"""
from dataclasses import dataclass

from .. import functional as F
from ..creation import zeros
from .. import nn


@dataclass
class MobileFormerConfig:
    in_chans: int = 1
    num_classes: int = 10
    width: int = 16                  # the convolutional branch: SmallCNN's widths w, 2w, 2w
    num_tokens: int = 4
    token_dim: int = 32
    num_heads: int = 2
    mlp_ratio: int = 2


def _heads(x, heads):
    """(B, T, C) -> (B, heads, T, C / heads)."""
    b, t, c = x.shape
    return x.reshape(b, t, heads, c // heads).transpose(1, 2)


def _merge(x):
    """(B, heads, T, d) -> (B, T, heads * d)."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class MobileToFormer(nn.Module):
    """The tokens read the feature map: queries W_q z, keys = values = the pixels (B, H*W, C) as they are."""

    def __init__(self, channels, token_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.norm = nn.LayerNorm(token_dim)
        self.query = nn.Linear(token_dim, channels)
        self.out = nn.Linear(channels, token_dim)
        self.last_weights = None

    def forward(self, x, z, need_weights=False):
        b, c, h, w = x.shape
        pixels = _heads(x.reshape(b, c, h * w).transpose(1, 2), self.num_heads)   # (B, heads, H*W, C / heads)
        q = _heads(self.query(self.norm(z)), self.num_heads)                       # (B, heads, M, C / heads)
        if need_weights:
            self.last_weights = F.attention_weights(q, pixels).detach()            # (B, heads, M, H*W)
        return self.out(_merge(F.scaled_dot_product_attention(q, pixels, pixels)))


class FormerToMobile(nn.Module):
    """Every pixel reads the tokens: the query is the pixel's channels as they are, keys W_k z and values W_v z."""

    def __init__(self, channels, token_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.norm = nn.LayerNorm(token_dim)
        self.key_value = nn.Linear(token_dim, 2 * channels)
        # The values start at 0, so the block starts as the plain convolution and learns how much to take from the
        # tokens (as nn.SelfAttention2d's gate starts at 0).
        self.key_value.weight.array[channels:] = 0
        self.key_value.bias.array[channels:] = 0

    def forward(self, x, z):
        b, c, h, w = x.shape
        pixels = _heads(x.reshape(b, c, h * w).transpose(1, 2), self.num_heads)   # (B, heads, H*W, C / heads)
        k, v = (_heads(t, self.num_heads) for t in self.key_value(self.norm(z)).split(c, dim=-1))
        out = _merge(F.scaled_dot_product_attention(pixels, k, v))                 # (B, H*W, C)
        return out.transpose(1, 2).reshape(b, c, h, w)


class Former(nn.Module):
    """A pre-norm Transformer block over the M tokens."""

    def __init__(self, token_dim, num_heads, mlp_ratio):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(token_dim), nn.LayerNorm(token_dim)
        self.attn = nn.Attention(token_dim, num_heads)
        self.mlp = nn.MLP(token_dim, mlp_ratio * token_dim)

    def forward(self, z):
        z = z + self.attn(self.norm1(z))
        return z + self.mlp(self.norm2(z))


class MobileFormerBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride, config):
        super().__init__()
        d, heads = config.token_dim, config.num_heads
        self.mobile_to_former = MobileToFormer(in_channels, d, heads)
        self.former = Former(d, heads, config.mlp_ratio)
        self.mobile = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.former_to_mobile = FormerToMobile(out_channels, d, heads)

    def forward(self, x, z, need_weights=False, former_to_mobile=True):
        z = z + self.mobile_to_former(x, z, need_weights)
        z = self.former(z)
        x = self.mobile(x).relu()
        if former_to_mobile:
            x = x + self.former_to_mobile(x, z)
        return x, z


class MobileFormer(nn.Module):
    """stem conv3x3 -> ReLU -> block (conv3x3/2) -> block (conv3x3/2) -> global mean -> Linear.

    forward(images, former_to_mobile=False) runs the same weights with the Former->Mobile bridges cut: the
    convolutional branch then gets nothing from the tokens (a test of how much it came to rely on them)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        w = config.width
        self.stem = nn.Conv2d(config.in_chans, w, 3, padding=1)
        self.tokens = nn.init.trunc_normal_(nn.Parameter(zeros(1, config.num_tokens, config.token_dim)), std=0.02)
        self.blocks = nn.ModuleList([MobileFormerBlock(w, 2 * w, 2, config), MobileFormerBlock(2 * w, 2 * w, 2, config)])
        self.head = nn.Linear(2 * w, config.num_classes)

    def forward(self, images, need_weights=False, former_to_mobile=True):
        x = self.stem(images).relu()
        z = self.tokens.expand(images.shape[0], *self.tokens.shape[1:])
        for block in self.blocks:
            x, z = block(x, z, need_weights, former_to_mobile)
        return self.head(x.mean(dim=(2, 3)))
