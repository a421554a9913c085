"""GPT: a decoder-only Transformer language model (Radford et al. 2018/2019), in the spirit of nanoGPT.

Token embedding + positions -> n_layer pre-norm blocks (x + attn(norm(x)), x + mlp(norm(x))) -> final norm ->
linear head. The options are the "modern tweaks": RMSNorm, SwiGLU or mixture-of-experts feed-forward, grouped-
or multi-query attention (num_kv_heads), rotary positions, and the flash attention path.
"""
from dataclasses import dataclass

from .. import backend, hub
from .. import functional as F
from ..tensor import Tensor, as_array, no_grad
from .. import nn
from ..nn.attention import check_impl
from . import hf_gpt2


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 128            # the longest context the model sees
    n_layer: int = 4
    num_heads: int = 4
    num_kv_heads: int = None            # None: = num_heads (MHA); 1: MQA; between: GQA
    d_model: int = 128
    dropout: float = 0.0
    norm: str = "layer"              # "layer" | "rms"
    prenorm: bool = True             # x + f(norm(x)) (GPT-2 on); False: norm(x + f(x)) (the original Transformer)
    mlp: str = "gelu"                # "gelu" | "swiglu" | "moe" | "none" (attention only, as in the circuits papers)
    mlp_hidden: int = None           # the feed-forward width; None: 4 * d_model (gelu), 8/3 * d_model (swiglu)
    activation: str = "gelu"         # of the "gelu" MLP: "gelu" | "gelu_tanh" (GPT-2's) | "relu"
    norm_eps: float = None           # None: 1e-5 for LayerNorm, 1e-6 for RMSNorm
    n_experts: int = 4
    top_k: int = 2
    position: str = "learned"        # "learned" | "sinusoidal" | "rope" | "none"
    rope_theta: float = 10000.0      # RoPE's base (Hugging Face's name): pair i turns by position * theta^(-2i/D)
    rope_interleaved: bool = False   # RoPE's pairs: (i, i + D/2) as Hugging Face's LLaMA; True: (2i, 2i + 1) as Meta's
    impl: str = "sdpa"               # "sdpa" | "flash" | "reference" (see nn.Attention)
    bias: bool = True
    tie_weights: bool = False        # share the token embedding with the output head

    def __post_init__(self):
        self.impl = check_impl(self.impl)          # refused early; "naive", the old name of "sdpa", kept as "sdpa"


ACTIVATIONS = {"gelu": lambda: nn.GELU(), "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "relu": lambda: nn.ReLU()}


def _norm(config):
    if config.norm == "layer":
        return nn.LayerNorm(config.d_model, eps=1e-5 if config.norm_eps is None else config.norm_eps)
    return nn.RMSNorm(config.d_model, eps=1e-6 if config.norm_eps is None else config.norm_eps)


class Block(nn.Module):
    def __init__(self, config, rotary=None):
        super().__init__()
        self.ln1 = _norm(config)
        self.ln2 = _norm(config) if config.mlp != "none" else None
        self.attn = nn.Attention(config.d_model, config.num_heads, config.num_kv_heads, bias=config.bias,
                                 dropout=config.dropout if config.impl != "flash" else 0.0, impl=config.impl,
                                 rotary=rotary)
        if config.mlp == "gelu":
            if config.activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {config.activation!r}")
            self.mlp = nn.MLP(config.d_model, config.mlp_hidden, ACTIVATIONS[config.activation](),
                              dropout=config.dropout, bias=config.bias)
        elif config.mlp == "swiglu":
            self.mlp = nn.SwiGLU(config.d_model, config.mlp_hidden, dropout=config.dropout)
        elif config.mlp == "moe":
            self.mlp = nn.MoE(config.d_model, config.n_experts, config.top_k, dropout=config.dropout)
        elif config.mlp == "none":
            self.mlp = None
        else:
            raise ValueError(f"mlp must be 'gelu', 'swiglu', 'moe' or 'none', got {config.mlp!r}")
        self.dropout, self.prenorm = config.dropout, config.prenorm
        nn.add_points(self, *nn.RESIDUAL_POINTS)

    def forward(self, x, cache=None, need_weights=False, position_ids=None):
        x = self.hook_resid_pre(x)
        x = nn.residual(x, lambda h: self.hook_attn_out(self.attn(h, is_causal=True, cache=cache,
                                                                  need_weights=need_weights,
                                                                  position_ids=position_ids)),
                        self.ln1, self.prenorm, self.dropout, self.training)
        x = self.hook_resid_mid(x)
        if self.mlp is not None:                                           # the MLP applies its own dropout
            x = nn.residual(x, lambda h: self.hook_mlp_out(self.mlp(h)), self.ln2, self.prenorm)
        return self.hook_resid_post(x)


class GPT(nn.Module):
    is_causal = True            # each position reads only the ones before it (tools such as interpret check this)

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        rotary = None
        if config.position == "learned":
            self.pos_emb = nn.LearnedPositionalEmbedding(config.block_size, config.d_model)
        elif config.position == "sinusoidal":                    # the original Transformer's fixed table
            self.pos_emb = nn.SinusoidalPositionalEncoding(config.d_model, max_len=config.block_size)
        elif config.position == "rope":
            rotary = nn.RotaryEmbedding(config.d_model // config.num_heads, max_len=config.block_size,
                                        base=config.rope_theta, interleaved=config.rope_interleaved)
        elif config.position != "none":                          # none: causal attention alone tells the order
            raise ValueError(f"position must be 'learned', 'sinusoidal', 'rope' or 'none', got {config.position!r}")
        self.blocks = nn.ModuleList(Block(config, rotary) for _ in range(config.n_layer))
        self.ln_f = _norm(config)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.head.weight = self.tok_emb.weight
        nn.add_points(self, "embed")                    # the token embeddings, before positions are added

    def forward(self, ids, targets=None, caches=None, return_attention=False, position_ids=None):
        """ids (B, T) -> logits (B, T, vocab); with targets, also the mean cross-entropy. caches: one KVCache per
        block, extended in place (positions continue from what they hold). return_attention=True also returns each
        block's causal attention weights (B, H, T, T), last. position_ids (T,) or (B, T), as in Hugging Face's
        models: the tokens' positions, in place of 0 .. T - 1 (or the cache's continuation)."""
        ids = as_array(ids)
        offset = len(caches[0]) if caches else 0
        if offset + ids.shape[1] > self.config.block_size:
            raise ValueError(f"{offset + ids.shape[1]} positions exceed block_size {self.config.block_size}")
        x = self.hook_embed(self.tok_emb(ids))
        if self.config.position in ("learned", "sinusoidal"):
            x = self.pos_emb(x, offset if position_ids is None else 0, position_ids)
        x = F.dropout(x, self.config.dropout, self.training)
        maps = []
        for i, block in enumerate(self.blocks):
            x = block(x, cache=caches[i] if caches else None, need_weights=return_attention,
                      position_ids=position_ids)
            if return_attention:
                maps.append(block.attn.last_weights)
        logits = self.head(self.ln_f(x))
        outputs = (logits,)
        if targets is not None:
            targets = as_array(targets)
            outputs += (F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)),)
        if return_attention:
            outputs += (maps,)
        return outputs[0] if len(outputs) == 1 else outputs

    @classmethod
    def from_pretrained(cls, name_or_folder, **overrides):
        """GPT-2 from a Hugging Face folder (config.json + model.safetensors, or shards) or a hub name ('gpt2',
        'gpt2-medium', 'openai-community/gpt2', ...; needs the hub extra and the network once). The weights keep
        the file's dtype (float32 for the published ones; bfloat16 is read as float32); .double() after, for
        float64. Returned in eval mode. overrides: dropout and impl, which config.json's weights do not fix (as
        nanoGPT's override_args), e.g. from_pretrained("gpt2", dropout=0.1) to fine-tune."""
        fixed = sorted(set(overrides) - {"dropout", "impl"})
        if fixed:
            raise TypeError(f"from_pretrained overrides dropout and impl only; {', '.join(fixed)} come from "
                            "config.json and the weights")
        return hub.load_model(cls, GPTConfig, hf_gpt2, name_or_folder, overrides)

    def save_pretrained(self, folder):
        """Write config.json and model.safetensors in GPT-2's layout, which transformers'
        GPT2LMHeadModel.from_pretrained(folder) reads; a model GPT-2 cannot express is refused naming the setting.
        Both files are built before either replaces an earlier save's, which a failure leaves whole; the folder's
        other files (tokenizer.json, preprocessor_config.json, a README) stay (hub.write_folder)."""
        config = hf_gpt2.config_to_hf(self.config)
        hub.write_folder(folder, config, hf_gpt2.state_dict_to_hf(self.state_dict(), self.config))

    def aux_loss(self):
        """The summed load-balancing losses of the MoE layers (0 without MoE)."""
        losses = [b.mlp.aux_loss for b in self.blocks if isinstance(b.mlp, nn.MoE) and b.mlp.aux_loss is not None]
        return sum(losses[1:], losses[0]) if losses else 0.0

    @no_grad()
    def generate(self, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None, eos_token_id=None,
                 pad_token_id=None, use_cache=True):
        """Continue ids (B, T) by up to max_new_tokens tokens; temperature=0 is greedy. top_k keeps the k likeliest
        tokens, top_p the smallest set of likeliest tokens whose probabilities add up to top_p or more (nucleus
        sampling; both as transformers' generate, applied after the temperature, top_k first). eos_token_id (an id or
        a list of them) stops a sequence once it has produced one; a stopped sequence continues with pad_token_id
        (default: the first eos id) and generation ends when every sequence has stopped, as in transformers.

        With use_cache, each step feeds one token and reads the keys and values of the earlier ones from a KVCache.
        The model sees at most block_size tokens: past them both paths read the last block_size tokens, and the
        cached path rebuilds its cache from them (learned positions cannot be shifted along), so both give the same
        tokens at any length."""
        ids = as_array(ids)
        xp = backend.xp_of(ids)
        block = self.config.block_size
        stops = None if eos_token_id is None else xp.asarray(
            [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id), dtype=ids.dtype)
        if pad_token_id is None and stops is not None:
            pad_token_id = int(stops[0])
        stopped = xp.zeros((ids.shape[0], 1), dtype=bool)
        caches, new_tokens = None, ids
        for _ in range(max_new_tokens):
            if not use_cache:
                logits = self(ids[:, -block:])
            else:
                if caches is None or len(caches[0]) + new_tokens.shape[1] > block:
                    caches, new_tokens = [nn.KVCache() for _ in self.blocks], ids[:, -block:]
                logits = self(new_tokens, caches=caches)
            next_id = _next_token(logits.array[:, -1, :], temperature, top_k, top_p, xp).astype(ids.dtype)
            if stops is not None:
                next_id = xp.where(stopped, ids.dtype.type(pad_token_id), next_id)
                stopped = stopped | xp.isin(next_id, stops)
            ids = xp.concatenate([ids, next_id], axis=1)
            new_tokens = next_id
            if stops is not None and bool(stopped.all()):
                break
        return Tensor(ids)

    def crop_block_size(self, block_size):
        """Shorten the context the model sees to block_size (as nanoGPT's crop_block_size): a model loaded with
        1024 learned positions keeps the first block_size of them, and uses less memory for attention."""
        if not 0 < block_size <= self.config.block_size:
            raise ValueError(f"crop_block_size takes 1 to block_size={self.config.block_size}, got {block_size}")
        self.config.block_size = block_size
        if self.config.position == "learned":
            self.pos_emb.weight = nn.Parameter(self.pos_emb.weight.array[:block_size].copy())
        elif self.config.position == "sinusoidal":
            self.pos_emb.pe = Tensor(self.pos_emb.pe.array[:block_size].copy())
        return self

    def flops_per_token(self, seq_len=None):
        """Forward+backward FLOPs per token: 6 per parameter in the matmuls a token passes through (2 forward,
        4 backward; in an MoE layer the router and top_k of the experts) plus the attention scores and weighted
        sums, 12 * n_layer * T * d_model (Kaplan et al. 2020; PaLM appendix B)."""
        seq_len = seq_len or self.config.block_size
        matmul_params = self.num_parameters() - self.tok_emb.weight.numel() * (not self.config.tie_weights)
        if self.config.position == "learned":
            matmul_params -= self.pos_emb.weight.numel()
        for block in self.blocks:
            if isinstance(block.mlp, nn.MoE):
                matmul_params -= (block.mlp.num_experts - block.mlp.top_k) * block.mlp.experts[0].num_parameters()
        return 6 * matmul_params + 12 * self.config.n_layer * seq_len * self.config.d_model


def _next_token(logits, temperature, top_k, top_p, xp):
    """(B, 1) next ids from the last position's logits (B, vocab): argmax at temperature 0, else a draw."""
    if temperature == 0:
        return logits.argmax(axis=-1)[:, None]
    logits = logits / temperature
    if top_k is not None:
        kth = xp.sort(logits, axis=-1)[:, -top_k][:, None]
        logits = xp.where(logits < kth, -xp.inf, logits)
    probs = F.softmax(Tensor(logits), dim=-1).array.astype(backend.float64)
    if top_p is not None:
        ranked = -xp.sort(-probs, axis=-1)
        before = ranked.cumsum(axis=-1) - ranked              # the probability of the likelier tokens
        least = xp.where(before < top_p, ranked, xp.inf).min(axis=-1, keepdims=True)     # the last one kept
        probs = xp.where(probs < least, 0.0, probs)
        probs /= probs.sum(axis=-1, keepdims=True)
    draws = backend.generator(backend.device_of(probs)).random((probs.shape[0], 1))
    next_id = (probs.cumsum(axis=-1) < draws).sum(axis=-1, keepdims=True)
    return xp.minimum(next_id, probs.shape[-1] - 1)
