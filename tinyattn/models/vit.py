"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words") and DeiT (Touvron et al. 2021).

An image is cut into patches, each patch flattened and linearly embedded: the patches are the tokens. A learned class
token is prepended, position embeddings added, and a stack of pre-norm Transformer encoder blocks (no mask: every
patch sees every patch) mixes them. The class token's final state (or the mean of all tokens) is classified. DeiT adds
a distillation token trained to match a teacher's predictions (hard or soft distillation).

Where a patch sits can be told to the model in six ways (ViTConfig.position), the ViT paper's ablation (its
Appendix D.4) plus the fixed tables of the original Transformer:
- "none": nothing; the model sees a bag of patches.
- "learned": one learned vector per token (the paper's default, "1-D").
- "sincos": the original Transformer's fixed sinusoidal table over the patches in reading order (1-D).
- "sincos2d": fixed, half the channels a sinusoidal table of the row, half of the column.
- "learned2d": learned, half the channels a learned vector per row, half a learned vector per column.
- "relative": nothing added to the tokens; each block adds a learned bias per head and per 2-D offset
  (dy, dx) between two patches to the attention scores (Swin's form of relative positions).
The class and distillation tokens get no position in the fixed, 2-D and relative schemes.
"""
from dataclasses import dataclass

from .. import backend, hub, ops
from .. import functional as F
from ..creation import zeros
from ..tensor import as_array
from .. import nn
from ..nn.attention import check_impl
from . import hf_vit


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
    position: str = "learned"        # "none" | "learned" | "sincos" | "sincos2d" | "learned2d" | "relative"
    pool: str = "cls"                # "cls" | "mean"
    impl: str = "sdpa"
    distillation: bool = False       # DeiT: add a distillation token and head
    norm_eps: float = 1e-6           # the LayerNorms' epsilon (timm's ViT; Hugging Face's google/vit-*: 1e-12)
    id2label: dict = None            # class index -> name, for a loaded model's predictions

    def __post_init__(self):
        self.impl = check_impl(self.impl)          # refused early; "naive", the old name of "sdpa", kept as "sdpa"


class EncoderBlock(nn.Module):
    """Pre-norm Transformer encoder block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model, num_heads, mlp_ratio=4, dropout=0.0, impl="sdpa", eps=1e-6):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=eps), nn.LayerNorm(d_model, eps=eps)
        self.attn = nn.Attention(d_model, num_heads, dropout=dropout if impl != "flash" else 0.0, impl=impl)
        self.mlp = nn.MLP(d_model, mlp_ratio * d_model, dropout=dropout)
        nn.add_points(self, *nn.RESIDUAL_POINTS)

    def forward(self, x, need_weights=False, attn_bias=None):
        """attn_bias: a float (H, T, T) tensor added to the attention scores (relative positions), or None."""
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.norm1(x), attn_mask=attn_bias,
                                                                 need_weights=need_weights)))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.norm2(x))))


class PatchRelativeBias(nn.Module):
    """A learned bias per head for every 2-D offset between two patches (nn.RelativePositionBias over the whole
    patch grid), as an (H, T, T) float mask for the attention scores; 0 in the rows and columns of the prefix tokens."""

    def __init__(self, grid, num_heads, num_prefix):
        super().__init__()
        self.bias = nn.RelativePositionBias(grid, num_heads)
        self.num_heads, self.num_prefix = num_heads, num_prefix

    def forward(self):
        patches = self.bias()                                                     # (H, N, N)
        h, n, p = self.num_heads, patches.shape[-1], self.num_prefix
        like = dict(dtype=patches.dtype, device=patches.device)
        rows = ops.cat([zeros(h, p, n, **like), patches], dim=1)                  # (H, P + N, N)
        return ops.cat([zeros(h, p + n, p, **like), rows], dim=2)                 # (H, P + N, P + N)


class ViT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.patch_embed = nn.PatchEmbed(config.image_size, config.patch_size, config.in_chans, config.d_model)
        self.num_prefix = 2 if config.distillation else 1
        self.cls_token = nn.init.trunc_normal_(nn.Parameter(zeros(1, 1, config.d_model)), std=0.02)
        if config.distillation:
            self.dist_token = nn.init.trunc_normal_(nn.Parameter(zeros(1, 1, config.d_model)), std=0.02)
        tokens, grid, d = self.num_prefix + self.patch_embed.num_patches, self.patch_embed.grid, config.d_model
        prefix = zeros(self.num_prefix, d)                              # class/distillation tokens: no position
        if config.position == "learned":
            self.pos_embed = nn.init.trunc_normal_(nn.Parameter(zeros(1, tokens, d)), std=0.02)
        elif config.position in ("sincos", "sincos2d"):
            table = (nn.sinusoidal_table(grid * grid, d) if config.position == "sincos"
                     else nn.sincos_2d_table(grid, grid, d))
            self.register_buffer("pos_embed", ops.cat([prefix, table]).unsqueeze(0), persistent=False)
        elif config.position == "learned2d":
            if d % 2:
                raise ValueError(f"learned 2-D positions need an even d_model, got {d}")
            self.row_embed = nn.init.trunc_normal_(nn.Parameter(zeros(grid, d // 2)), std=0.02)
            self.col_embed = nn.init.trunc_normal_(nn.Parameter(zeros(grid, d // 2)), std=0.02)
        elif config.position in ("none", "relative"):
            self.pos_embed = None
        else:
            raise ValueError("position must be 'none', 'learned', 'sincos', 'sincos2d', 'learned2d' or 'relative', "
                             f"got {config.position!r}")
        self.blocks = nn.ModuleList(EncoderBlock(config.d_model, config.num_heads, config.mlp_ratio, config.dropout,
                                                 config.impl, config.norm_eps) for _ in range(config.depth))
        self.relative_bias = None
        if config.position == "relative":                                  # one table per block, as in Swin
            self.relative_bias = nn.ModuleList(PatchRelativeBias(grid, config.num_heads, self.num_prefix)
                                               for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.head = nn.Linear(config.d_model, config.num_classes)
        self.head_dist = nn.Linear(config.d_model, config.num_classes) if config.distillation else None

    @classmethod
    def from_pretrained(cls, name_or_folder):
        """A ViTForImageClassification from a Hugging Face folder (config.json + model.safetensors) or a hub name
        ('google/vit-base-patch16-224'; needs the hub extra and the network once), in eval mode, in the file's
        dtype. config.id2label names its classes; preprocessing.ImageProcessor.from_pretrained(same) prepares images."""
        return hub.load_model(cls, ViTConfig, hf_vit, name_or_folder)

    def features(self, images, need_weights=False):
        """The final normalised tokens (B, prefix + N, D), and per block the attention maps (B, H, T, T) if asked."""
        x = self.patch_embed(images)
        b = x.shape[0]
        prefix = [self.cls_token.expand(b, 1, self.config.d_model)]
        if self.config.distillation:
            prefix.append(self.dist_token.expand(b, 1, self.config.d_model))
        x = ops.cat(prefix + [x], dim=1)
        positions = self.position_table()
        if positions is not None:
            x = x + positions
        x = F.dropout(x, self.config.dropout, self.training)
        maps = []
        for i, block in enumerate(self.blocks):
            bias = self.relative_bias[i]() if self.relative_bias is not None else None
            x = block(x, need_weights=need_weights, attn_bias=bias)
            if need_weights:
                maps.append(block.attn.last_weights)
        return self.norm(x), maps

    def position_table(self):
        """What is added to the tokens to tell where they sit: (1, prefix + N, D), or None ("none", "relative")."""
        if self.config.position != "learned2d":
            return getattr(self, "pos_embed", None)
        grid, half = self.row_embed.shape
        rows = self.row_embed.unsqueeze(1).expand(grid, grid, half)               # row r, any column
        cols = self.col_embed.unsqueeze(0).expand(grid, grid, half)               # any row, column c
        table = ops.cat([rows, cols], dim=-1).reshape(grid * grid, 2 * half)
        prefix = zeros(self.num_prefix, 2 * half, dtype=table.dtype, device=table.device)
        return ops.cat([prefix, table]).unsqueeze(0)

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


def deit_soft_distillation_loss(class_logits, dist_logits, labels, teacher_logits, temperature=3.0, alpha=0.5):
    """Soft distillation (Hinton et al. 2015, as DeiT writes it): (1 - alpha) cross-entropy with the labels on the
    class token, plus alpha T^2 KL(softmax(teacher / T) || softmax(student / T)) on the distillation token. The T^2
    keeps the gradient's size independent of T. (DeiT used T = 3, alpha = 0.1 on ImageNet.)"""
    scale = 1.0 / temperature
    log_teacher = F.log_softmax(teacher_logits.detach() * scale, dim=-1)
    log_student = F.log_softmax(dist_logits * scale, dim=-1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(dim=-1).mean()
    return F.cross_entropy(class_logits, labels) * (1.0 - alpha) + kl * (alpha * temperature ** 2)


def position_neighbour_similarity(table, grid):
    """How alike a (grid^2, D) table of patch positions (reading order) makes neighbours: the mean cosine similarity
    of each patch's vector with its right neighbour's, with the one below's, and with those grid or more steps away
    (|dy| + |dx|). Returns (right, below, far) as floats."""
    xp = backend.numpy
    e = backend.to_host(as_array(table)).astype(xp.float64)
    e = e / xp.linalg.norm(e, axis=1, keepdims=True)
    sim = e @ e.T
    n = grid * grid
    right = xp.mean([sim[i, i + 1] for i in range(n) if (i + 1) % grid])
    below = xp.mean([sim[i, i + grid] for i in range(n - grid)])
    far = xp.mean([sim[i, j] for i in range(n) for j in range(n)
                      if abs(i // grid - j // grid) + abs(i % grid - j % grid) >= grid])
    return float(right), float(below), float(far)


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
