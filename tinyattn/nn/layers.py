"""Layers with PyTorch's names, argument names, parameter shapes and default initialisation."""
from .. import backend, ops
from .. import functional as F
from ..creation import empty_parameter_data
from ..tensor import Tensor
from .hook_point import add_points
from .module import Module, ModuleList, Parameter
from . import init


def _parameter(*shape):
    return Parameter(empty_parameter_data(shape))


class Identity(Module):
    def forward(self, x):
        return x


class Linear(Module):
    """y = x W^T + b, weight (out_features, in_features), both drawn from U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = init.default_uniform_(_parameter(out_features, in_features), in_features)
        self.bias = init.default_uniform_(_parameter(out_features), in_features) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        padding_idx = F.padding_row(padding_idx, num_embeddings)
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = init.normal_(_parameter(num_embeddings, embedding_dim))
        if padding_idx is not None:
            self.weight.array[padding_idx] = 0

    def forward(self, ids):
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = init.ones_(_parameter(*self.normalized_shape)) if elementwise_affine else None
        self.bias = init.zeros_(_parameter(*self.normalized_shape)) if elementwise_affine and bias else None

        add_points(self, "scale")

    def forward(self, x):
        if not self.hook_scale.hooked:
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        # written out, so that hook_scale (..., 1), sqrt(variance + eps), can be read or replaced (a frozen scale
        # makes the norm linear: what direct logit attribution assumes)
        dims = tuple(range(-len(self.normalized_shape), 0))
        centred = x - x.mean(dim=dims, keepdim=True)
        scale = self.hook_scale(((centred * centred).mean(dim=dims, keepdim=True) + self.eps).sqrt())
        out = centred / scale
        out = out if self.weight is None else out * self.weight
        return out if self.bias is None else out + self.bias

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = init.ones_(_parameter(*self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        """inplace is accepted so that PyTorch code runs; the result is a new tensor either way."""
        super().__init__()
        F.check_probability("dropout", p)
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class ReLU(Module):
    def __init__(self, inplace=False):
        """inplace is accepted so that PyTorch code runs; the result is a new tensor either way."""
        super().__init__()

    def forward(self, x):
        return ops.relu(x)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class Tanh(Module):
    def forward(self, x):
        return ops.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return ops.sigmoid(x)


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return F.log_softmax(x, self.dim)


class Flatten(Module):
    """Flatten dims start_dim..end_dim into one (by default every dim but the batch), as nn.Flatten."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return ops.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


def residual(x, sublayer, norm, prenorm, dropout=0.0, training=False):
    """A sublayer with its residual connection and its norm: x + dropout(sublayer(norm(x))) when prenorm (GPT-2 on,
    trains deep stacks without warm-up), else norm(x + dropout(sublayer(x))) (post-norm, the 2017 Transformer)."""
    if prenorm:
        return x + F.dropout(sublayer(norm(x)), dropout, training)
    return norm(x + F.dropout(sublayer(x), dropout, training))


class MLP(Module):
    """The Transformer feed-forward block: Linear(D, 4D) -> activation -> Linear(4D, D) -> dropout."""

    def __init__(self, d_model, hidden=None, activation=None, dropout=0.0, bias=True):
        super().__init__()
        hidden = hidden or 4 * d_model
        self.fc1 = Linear(d_model, hidden, bias)
        self.act = activation if activation is not None else GELU()
        self.fc2 = Linear(hidden, d_model, bias)
        self.dropout = Dropout(dropout)
        add_points(self, "pre", "post")                 # the hidden layer before and after the activation

    def forward(self, x):
        return self.dropout(self.fc2(self.hook_post(self.act(self.hook_pre(self.fc1(x))))))


class SwiGLU(Module):
    """Gated feed-forward of LLaMA and PaLM: (silu(x W1) * x W2) W3, hidden 8D/3 so parameters match a 4D MLP."""

    def __init__(self, d_model, hidden=None, dropout=0.0, bias=False):
        super().__init__()
        hidden = hidden or int(8 * d_model / 3)
        self.w1 = Linear(d_model, hidden, bias)
        self.w2 = Linear(d_model, hidden, bias)
        self.w3 = Linear(hidden, d_model, bias)
        self.dropout = Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.w3(F.silu(self.w1(x)) * self.w2(x)))


class MoE(Module):
    """Mixture of experts: a router picks top_k expert MLPs per token and mixes their outputs.

    Tokens are grouped by expert (one batched call per expert, no Python loop over tokens); the gates are the router's
    softmax probabilities renormalised over the chosen experts. After each forward, ``aux_loss`` holds the
    Switch-Transformer load-balancing loss E * sum_e f_e * P_e (f_e: share of routed slots sent to expert e, P_e: mean
    router probability of e); it is 1 for perfectly balanced routing. Add ``coef * moe.aux_loss`` to the training loss.
    """

    def __init__(self, d_model, num_experts=4, top_k=2, hidden=None, activation=None, dropout=0.0):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k must be between 1 and num_experts={num_experts}, got {top_k}")
        self.num_experts, self.top_k = num_experts, top_k
        self.router = Linear(d_model, num_experts, bias=False)
        self.experts = ModuleList(MLP(d_model, hidden, activation, dropout) for _ in range(num_experts))
        self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        n = tokens.shape[0]
        probs = F.softmax(self.router(tokens), dim=-1)                       # (N, E)
        xp = backend.xp_of(probs.array)
        chosen = xp.argsort(-probs.array, axis=-1)[:, :self.top_k]             # (N, k) expert ids, best first
        rows = xp.arange(n)[:, None]
        gates = probs[rows, chosen]
        gates = gates / gates.sum(dim=-1, keepdim=True)                       # renormalised over the chosen
        out = Tensor(xp.zeros_like(tokens.array))
        flat_expert = chosen.reshape(-1)
        flat_token = xp.repeat(xp.arange(n), self.top_k)
        flat_gate = gates.reshape(-1)
        for e, expert in enumerate(self.experts):
            slots = xp.nonzero(flat_expert == e)[0]
            if slots.size == 0:
                continue
            token_ids = flat_token[slots]
            mixed = expert(tokens[token_ids]) * flat_gate[slots].unsqueeze(-1)
            out = ops.index_add(out, 0, token_ids, mixed)
        routed_share = xp.bincount(flat_expert, minlength=self.num_experts).astype(probs.dtype) / (n * self.top_k)
        self.aux_loss = (probs.mean(dim=0) * Tensor(routed_share)).sum() * float(self.num_experts)
        return out.reshape(shape)


class Conv2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (kh, kw)
        self.stride, self.padding = stride, padding
        fan = in_channels * kh * kw
        self.weight = init.default_uniform_(_parameter(out_channels, in_channels, kh, kw), fan)
        self.bias = init.default_uniform_(_parameter(out_channels), fan) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class PatchEmbed(Module):
    """Image (B, C, H, W) -> patch tokens (B, H/p * W/p, D): cut into p x p patches, flatten each, one Linear.

    That is exactly a Conv2d with kernel = stride = p (tests/test_nn.py proves it); the reshape makes it plain that a
    ViT's first layer just treats each patch as a word.
    """

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.patch_size, self.grid = patch_size, img_size // patch_size
        self.num_patches = self.grid * self.grid
        self.proj = Linear(in_chans * patch_size * patch_size, embed_dim)

    def patchify(self, images):
        """(B, C, H, W) -> (B, N, C * p * p), each row one patch flattened in (c, y, x) order."""
        b, c, h, w = images.shape
        p = self.patch_size
        if h % p or w % p:
            raise ValueError(f"image {h}x{w} is not a multiple of patch_size {p}")
        patches = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return patches.reshape(b, (h // p) * (w // p), c * p * p)

    def forward(self, images):
        return self.proj(self.patchify(images))
