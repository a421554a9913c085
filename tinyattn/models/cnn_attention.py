"""Attention inside convolutional networks, in the two ways the SAGAN block (nn.SelfAttention2d) does not cover:

- LocalSelfAttention2d: stand-alone local self-attention (Ramachandran et al. 2019; the "local relation" layer of
  Hu et al. 2019 is the same idea). A convolution's output at a pixel is a fixed weighting of the k x k pixels around
  it; here the pixel's query is compared with the keys of those k x k pixels, and the softmax of the scores (plus a
  learned bias per relative offset and head) weighs their values. LocalAttentionCNN is SmallCNN (models/cnn.py) with
  every 3 x 3 convolution replaced by this layer.
- AttentionPooling: attention-based aggregation (Touvron et al. 2021, "Augmenting Convolutional networks with
  attention-based aggregation"). Instead of averaging the final feature map, a learned class query attends over its
  positions (one class-attention block: the query is the class token, keys and values are the class token and every
  position), so the network chooses which positions to read, and the weights say where it looked.
"""
from dataclasses import dataclass

from .. import ops
from .. import functional as F
from ..backend import xp_of
from ..creation import zeros
from ..tensor import Tensor
from .. import nn


def neighbourhoods(x, kernel_size, stride=1):
    """x (B, C, H, W) -> (B, C, k*k, H', W'): for every output pixel the k x k input pixels centred on it (F.unfold
    with padding k // 2); and inside (k*k, H', W'), a boolean array that is True where that input pixel lies inside
    the image (the padding's zeros are not pixels)."""
    b, c = x.shape[:2]
    xp = xp_of(x.array)
    out_h, out_w = ((n - 1) // stride + 1 for n in x.shape[2:])
    windows = F.unfold(x, kernel_size, padding=kernel_size // 2, stride=stride)
    ones = F.unfold(Tensor(xp.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype)), kernel_size,
                    padding=kernel_size // 2, stride=stride)
    shape = (kernel_size * kernel_size, out_h, out_w)
    return windows.reshape((b, c) + shape), ones.array.reshape(shape) > 0


def _per_pixel(linear, x):
    """A Linear over the channels of every pixel (a 1 x 1 convolution): (B, C_in, H, W) -> (B, C_out, H, W)."""
    return linear(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class LocalSelfAttention2d(nn.Module):
    """Self-attention of every pixel over its k x k neighbourhood, a drop-in for nn.Conv2d(in_channels, out_channels,
    kernel_size, stride, padding=kernel_size // 2): (B, C_in, H, W) -> (B, C_out, H', W').

    q, k, v are per-pixel Linear projections of the input (1 x 1, no spatial mixing). For output pixel p and the
    neighbour at offset o, score[h] = q_p[h] . k_{p+o}[h] / sqrt(head_dim) + bias[h, o]; neighbours beyond the border
    are masked; the output is the projection of sum_o softmax_o(score) v_{p+o}. The bias per offset is what lets a
    head prefer "the pixel to my left": without it the layer cannot tell where in the window a neighbour sits
    (attention is permutation invariant), and with k*k heads each fixed on one offset it can express any k x k
    convolution (Cordonnier et al. 2020). With stride s, queries sit every s pixels, as a strided convolution's outputs.
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, num_heads=4, bias_std=3.0):
        super().__init__()
        if out_channels % num_heads:
            raise ValueError(f"out_channels {out_channels} is not divisible by num_heads {num_heads}")
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a centre pixel), got {kernel_size}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.num_heads = kernel_size, stride, num_heads
        self.qkv = nn.Linear(in_channels, 3 * out_channels)
        self.proj = nn.Linear(out_channels, out_channels)
        # He initialisation (He et al. 2015): q, k, v with variance 2 / fan-in (a ReLU follows the layer), the output
        # projection 1 / fan-in, biases 0, so the signal keeps its scale from layer to layer. With nn.Linear's default
        # (variance 1 / (3 fan-in)) in both projections it shrank about tenfold per layer on the digits, and a
        # three-layer stack stayed at chance for epochs.
        nn.init.normal_(self.qkv.weight, std=(2 / in_channels) ** 0.5)
        nn.init.normal_(self.proj.weight, std=(1 / out_channels) ** 0.5)
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.proj.bias)
        # One learned bias per head and relative offset, (heads, k*k, 1, 1) to broadcast over the output pixels. Its
        # spread at the start (bias_std) makes each head begin mostly on one offset, as a convolution's tap would;
        # with a spread near 0 every head would begin as the same uniform blur.
        taps = kernel_size * kernel_size
        self.relative_bias = nn.init.normal_(nn.Parameter(zeros(num_heads, taps, 1, 1)), std=bias_std)
        self.last_weights = None

    def forward(self, x, need_weights=False):
        b = x.shape[0]
        heads, c, s = self.num_heads, self.out_channels, self.stride
        hd, taps = c // heads, self.kernel_size ** 2
        q, k, v = _per_pixel(self.qkv, x).split(c, dim=1)                         # each (B, C, H, W)
        q = q[:, :, ::s, ::s]                                                      # the query pixels
        out_h, out_w = q.shape[2:]
        q = q.reshape(b, heads, hd, 1, out_h, out_w)
        k, inside = neighbourhoods(k, self.kernel_size, s)                         # (B, C, k*k, H', W')
        v, _ = neighbourhoods(v, self.kernel_size, s)
        k = k.reshape(b, heads, hd, taps, out_h, out_w)
        v = v.reshape(b, heads, hd, taps, out_h, out_w)
        scores = (q * k).sum(dim=2) * (hd ** -0.5) + self.relative_bias           # (B, heads, k*k, H', W')
        scores = ops.masked_fill(scores, ~inside, float("-inf"))
        weights = F.softmax(scores, dim=2)
        if need_weights:
            self.last_weights = weights.detach()
        out = (weights.unsqueeze(2) * v).sum(dim=3).reshape(b, c, out_h, out_w)   # sum over the neighbours
        return _per_pixel(self.proj, out)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"num_heads={self.num_heads}")


class AttentionPooling(nn.Module):
    """(B, C, H, W) -> (B, C): a learned class token attends over the H*W positions (and itself), then an MLP; both
    residual and pre-norm, as a Transformer block that updates the class token only. After a forward with
    need_weights=True, .last_weights (B, heads, H*W) holds where the class token looked (its weight on itself
    left out)."""

    def __init__(self, channels, num_heads=4, mlp_ratio=2):
        super().__init__()
        self.cls_token = nn.init.trunc_normal_(nn.Parameter(zeros(1, 1, channels)), std=0.02)
        self.norm1, self.norm2, self.norm = nn.LayerNorm(channels), nn.LayerNorm(channels), nn.LayerNorm(channels)
        self.attn = nn.Attention(channels, num_heads, cross=True)
        self.mlp = nn.MLP(channels, mlp_ratio * channels)
        self.last_weights = None

    def forward(self, x, need_weights=False):
        b, c, h, w = x.shape
        positions = x.reshape(b, c, h * w).transpose(1, 2)                        # (B, H*W, C)
        cls = self.cls_token.expand(b, 1, c)
        context = self.norm1(ops.cat([cls, positions], dim=1))
        cls = cls + self.attn(context[:, :1], context=context, need_weights=need_weights)
        if need_weights:
            self.last_weights = self.attn.last_weights[:, :, 0, 1:].detach()
        cls = cls + self.mlp(self.norm2(cls))
        return self.norm(cls[:, 0])


@dataclass
class LocalAttentionCNNConfig:
    in_chans: int = 1
    num_classes: int = 10
    width: int = 24                  # 24: about the parameters of SmallCNN at width 16
    kernel_size: int = 3
    num_heads: int = 8


class LocalAttentionCNN(nn.Module):
    """SmallCNN (models/cnn.py) with each 3 x 3 convolution replaced by local self-attention over the same 3 x 3
    neighbourhood and with the same stride: attn -> ReLU -> attn/2 -> ReLU -> attn/2 -> ReLU -> global mean -> Linear."""

    def __init__(self, config):
        super().__init__()
        w, k, heads = config.width, config.kernel_size, config.num_heads
        self.attn1 = LocalSelfAttention2d(config.in_chans, w, k, 1, heads)
        self.attn2 = LocalSelfAttention2d(w, 2 * w, k, 2, heads)
        self.attn3 = LocalSelfAttention2d(2 * w, 2 * w, k, 2, heads)
        self.head = nn.Linear(2 * w, config.num_classes)

    def forward(self, images):
        x = self.attn2(self.attn1(images).relu()).relu()
        x = self.attn3(x).relu()
        return self.head(x.mean(dim=(2, 3)))
