"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words") and DeiT (Touvron et al. 2021).

An image is cut into patches, each patch flattened and linearly embedded: the patches are the tokens. A learned class
token is prepended, position embeddings added, and a stack of pre-norm Transformer encoder blocks (no mask: every
patch sees every patch) mixes them. The class token's final state (or the mean of all tokens) is classified. DeiT adds
a distillation token trained to match a teacher's predictions (hard distillation).
"""
from dataclasses import dataclass

from .. import backend, ops
from .. import functional as F
from ..creation import zeros
from ..tensor import as_array
from .. import nn


@dataclass
class ViTConfig:
    image_size: int = 32
    patch_size: int = 4
    in_chans: int = 1
    num_classes: int = 10
    d_model: int = 64
    depth: int = 4
    num_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    position: str = "learned"        # "learned" (1-D, one vector per patch) | "sincos2d" (fixed, row and column)
    pool: str = "cls"                # "cls" | "mean"
    impl: str = "naive"
    distillation: bool = False       # DeiT: add a distillation token and head


class EncoderBlock(nn.Module):
    """Pre-norm Transformer encoder block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model, num_heads, mlp_ratio=4, dropout=0.0, impl="naive"):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=1e-6), nn.LayerNorm(d_model, eps=1e-6)
        self.attn = nn.MultiHeadAttention(d_model, num_heads, dropout=dropout if impl != "flash" else 0.0, impl=impl)
        self.mlp = nn.MLP(d_model, mlp_ratio * d_model, dropout=dropout)

    def forward(self, x, need_weights=False):
        x = x + self.attn(self.norm1(x), need_weights=need_weights)
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.patch_embed = nn.PatchEmbed(config.image_size, config.patch_size, config.in_chans, config.d_model)
        self.num_prefix = 2 if config.distillation else 1
        self.cls_token = nn.init.trunc_normal_(nn.Parameter(zeros(1, 1, config.d_model)), std=0.02)
        if config.distillation:
            self.dist_token = nn.init.trunc_normal_(nn.Parameter(zeros(1, 1, config.d_model)), std=0.02)
        tokens = self.num_prefix + self.patch_embed.num_patches
        if config.position == "learned":
            self.pos_embed = nn.init.trunc_normal_(nn.Parameter(zeros(1, tokens, config.d_model)), std=0.02)
        elif config.position == "sincos2d":
            grid = self.patch_embed.grid
            prefix = zeros(self.num_prefix, config.d_model)                  # class/distillation tokens: no position
            table = ops.cat([prefix, nn.sincos_2d_table(grid, grid, config.d_model)])
            self.register_buffer("pos_embed", table.unsqueeze(0), persistent=False)
        else:
            raise ValueError(f"position must be 'learned' or 'sincos2d', got {config.position!r}")
        self.blocks = nn.ModuleList(EncoderBlock(config.d_model, config.num_heads, config.mlp_ratio, config.dropout,
                                                 config.impl) for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.d_model, eps=1e-6)
        self.head = nn.Linear(config.d_model, config.num_classes)
        self.head_dist = nn.Linear(config.d_model, config.num_classes) if config.distillation else None

    def features(self, images, need_weights=False):
        """The final normalised tokens (B, prefix + N, D), and per block the attention maps (B, H, T, T) if asked."""
        x = self.patch_embed(images)
        b = x.shape[0]
        prefix = [self.cls_token.expand(b, 1, self.config.d_model)]
        if self.config.distillation:
            prefix.append(self.dist_token.expand(b, 1, self.config.d_model))
        x = ops.cat(prefix + [x], dim=1) + self.pos_embed
        x = F.dropout(x, self.config.dropout, self.training)
        maps = []
        for block in self.blocks:
            x = block(x, need_weights=need_weights)
            if need_weights:
                maps.append(block.attn.last_weights)
        return self.norm(x), maps

    def forward(self, images, return_attention=False):
        """Class logits (B, classes). DeiT in training returns (class-token logits, distillation-token logits); in
        eval it returns their average. return_attention=True also returns the per-block attention maps."""
        x, maps = self.features(images, need_weights=return_attention)
        pooled = x[:, 0] if self.config.pool == "cls" else x[:, self.num_prefix:].mean(dim=1)
        logits = self.head(pooled)
        if self.config.distillation:
            dist_logits = self.head_dist(x[:, 1])
            logits = (logits, dist_logits) if self.training else (logits + dist_logits) * 0.5
        return (logits, maps) if return_attention else logits


def deit_hard_distillation_loss(class_logits, dist_logits, labels, teacher_logits):
    """DeiT's hard distillation: half cross-entropy with the labels on the class token, half with the teacher's
    argmax on the distillation token."""
    teacher_labels = teacher_logits.array.argmax(axis=-1)
    return F.cross_entropy(class_logits, labels) * 0.5 + F.cross_entropy(dist_logits, teacher_labels) * 0.5


def mean_attention_distance(weights, grid, patch_size, num_prefix=1):
    """Per head, the attention-weighted mean distance in pixels between a query patch and the patches it attends
    to (the ViT paper's Figure 7). weights (B, H, T, T) with T = num_prefix + grid^2. Returns a host array (H,)."""
    w = backend.to_host(as_array(weights))[:, :, num_prefix:, num_prefix:]
    xp = backend.numpy
    ys, xs = xp.meshgrid(xp.arange(grid), xp.arange(grid), indexing="ij")
    coords = xp.stack([ys.reshape(-1), xs.reshape(-1)], axis=1) * patch_size
    distance = xp.sqrt(((coords[:, None, :] - coords[None, :, :]) ** 2).sum(-1))          # (N, N)
    w = w / xp.maximum(w.sum(-1, keepdims=True), 1e-12)                                     # renormalise over patches
    return (w * distance).sum(-1).mean(axis=(0, 2))
