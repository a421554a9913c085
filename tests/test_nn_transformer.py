"""nn.Transformer and its family (issue 55): PyTorch's parameter names and state_dict keys (written down here from
PyTorch 2.13), the documented math re-done in NumPy in float64 (post- and pre-norm, bool and float masks, the three
key padding masks, batch_first both ways, relu / gelu / a callable, bias=False), the is_causal hint as PyTorch
applies it, gradcheck, and word_language_model's TransformerModel(nn.Transformer) that replaces the decoder."""
import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn

from conftest import host, randn

E, H, FF = 8, 2, 16          # d_model, nhead, dim_feedforward
S, T, B = 5, 4, 3            # source length, target length, batch

TRANSFORMER_KEYS = [         # PyTorch's nn.Transformer(8, 2, 2, 1, 16).state_dict(), in its order
    "encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.in_proj_bias",
    "encoder.layers.0.self_attn.out_proj.weight", "encoder.layers.0.self_attn.out_proj.bias",
    "encoder.layers.0.linear1.weight", "encoder.layers.0.linear1.bias",
    "encoder.layers.0.linear2.weight", "encoder.layers.0.linear2.bias",
    "encoder.layers.0.norm1.weight", "encoder.layers.0.norm1.bias",
    "encoder.layers.0.norm2.weight", "encoder.layers.0.norm2.bias",
    "encoder.layers.1.self_attn.in_proj_weight", "encoder.layers.1.self_attn.in_proj_bias",
    "encoder.layers.1.self_attn.out_proj.weight", "encoder.layers.1.self_attn.out_proj.bias",
    "encoder.layers.1.linear1.weight", "encoder.layers.1.linear1.bias",
    "encoder.layers.1.linear2.weight", "encoder.layers.1.linear2.bias",
    "encoder.layers.1.norm1.weight", "encoder.layers.1.norm1.bias",
    "encoder.layers.1.norm2.weight", "encoder.layers.1.norm2.bias",
    "encoder.norm.weight", "encoder.norm.bias",
    "decoder.layers.0.self_attn.in_proj_weight", "decoder.layers.0.self_attn.in_proj_bias",
    "decoder.layers.0.self_attn.out_proj.weight", "decoder.layers.0.self_attn.out_proj.bias",
    "decoder.layers.0.multihead_attn.in_proj_weight", "decoder.layers.0.multihead_attn.in_proj_bias",
    "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.layers.0.multihead_attn.out_proj.bias",
    "decoder.layers.0.linear1.weight", "decoder.layers.0.linear1.bias",
    "decoder.layers.0.linear2.weight", "decoder.layers.0.linear2.bias",
    "decoder.layers.0.norm1.weight", "decoder.layers.0.norm1.bias",
    "decoder.layers.0.norm2.weight", "decoder.layers.0.norm2.bias",
    "decoder.layers.0.norm3.weight", "decoder.layers.0.norm3.bias",
    "decoder.norm.weight", "decoder.norm.bias",
]


def small_transformer(**kwargs):
    """nn.Transformer(8, 2, 2 encoder layers, 1 decoder layer, 16) in float64 without dropout, its 1-D parameters
    (LayerNorm scales, every bias) drawn away from 1 and 0 so that a slip in any of them shows."""
    kwargs = {"num_encoder_layers": 2, "num_decoder_layers": 1, "dropout": 0.0, **kwargs}
    model = nn.Transformer(d_model=E, nhead=H, dim_feedforward=FF, dtype=ta.float64, **kwargs)
    for name, p in model.named_parameters():
        if p.ndim == 1:
            nn.init.normal_(p, 1.0 if name.endswith("weight") else 0.0, 0.3)
    return model


# -- names and keys ------------------------------------------------------------------------------------------------
def test_state_dict_keys_and_shapes_are_pytorchs():
    model = nn.Transformer(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=FF)
    assert list(model.state_dict()) == TRANSFORMER_KEYS
    assert [name for name, _ in model.named_parameters()] == TRANSFORMER_KEYS
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes["decoder.layers.0.multihead_attn.in_proj_weight"] == (3 * E, E)
    assert shapes["decoder.layers.0.multihead_attn.in_proj_bias"] == (3 * E,)
    assert shapes["encoder.layers.1.linear1.weight"] == (FF, E) and shapes["encoder.layers.1.linear2.weight"] == (E, FF)
    layer = model.encoder.layers[0]
    assert isinstance(layer.self_attn, nn.MultiheadAttention) and layer.activation is F.relu
    assert isinstance(layer.dropout, nn.Dropout) and isinstance(layer.dropout2, nn.Dropout)
    assert model.d_model == E and model.nhead == H and model.batch_first is False


def test_bias_false_drops_every_bias_in_linears_attention_and_layer_norms():
    assert list(nn.TransformerEncoderLayer(E, H, FF, bias=False).state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "linear2.weight", "norm1.weight",
        "norm2.weight"]
    assert list(nn.TransformerDecoderLayer(E, H, FF, bias=False).state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.out_proj.weight", "multihead_attn.in_proj_weight",
        "multihead_attn.out_proj.weight", "linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight",
        "norm3.weight"]
    model = nn.Transformer(E, H, 1, 1, FF, bias=False)
    assert model.encoder.norm.bias is None and not [n for n in model.state_dict() if n.endswith("bias")]


def test_a_state_dict_loads_into_a_fresh_model_and_gives_the_same_output():
    first, second = small_transformer(), small_transformer()
    src, tgt = randn(S, B, E, requires_grad=False), randn(T, B, E, requires_grad=False)
    assert not np.allclose(host(first(src, tgt)), host(second(src, tgt)))
    second.load_state_dict(first.state_dict())
    np.testing.assert_array_equal(host(first(src, tgt)), host(second(src, tgt)))


def test_stacks_hold_independent_copies_of_the_layer():
    layer = nn.TransformerEncoderLayer(E, H, FF)
    encoder = nn.TransformerEncoder(layer, num_layers=3)
    first, second = encoder.layers[0].linear1.weight, encoder.layers[1].linear1.weight
    assert first is not second and first is not layer.linear1.weight
    np.testing.assert_array_equal(host(first), host(layer.linear1.weight))     # copies, as PyTorch's deepcopy
    with ta.no_grad():
        first.mul_(2.0)
    assert not np.allclose(host(first), host(second))
    assert encoder.num_layers == 3 and encoder.norm is None and len(encoder.layers) == 3


def test_custom_encoder_and_decoder_take_the_stacks_places():
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF), num_layers=1)        # no final norm
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF), num_layers=2, norm=nn.LayerNorm(E))
    model = nn.Transformer(E, H, custom_encoder=encoder, custom_decoder=decoder, device="cpu")
    assert model.encoder is encoder and model.decoder is decoder
    keys = list(model.state_dict())
    assert "encoder.norm.weight" not in keys and "decoder.layers.1.norm3.bias" in keys and "decoder.norm.bias" in keys
    assert model(ta.randn(S, B, E), ta.randn(T, B, E)).shape == (T, B, E)


def test_transformer_draws_every_matrix_with_xavier_uniform_and_leaves_vectors():
    model = nn.Transformer(E, H, 1, 1, FF)
    for name, p in model.named_parameters():
        values = host(p)
        if p.ndim > 1:
            bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
            assert np.abs(values).max() <= bound and np.abs(values).max() > 0.5 * bound, name
        elif "norm" in name:
            np.testing.assert_array_equal(values, 1.0 if name.endswith("weight") else 0.0)
    # out_proj.weight is a matrix too: xavier's bound, not nn.Linear's 1 / sqrt(in)
    assert np.abs(host(model.encoder.layers[0].self_attn.out_proj.weight)).max() > 1 / math.sqrt(E)


def test_dtype_argument_and_float32_staying_float32():
    assert all(p.dtype == np.float64 for p in nn.Transformer(E, H, 1, 1, FF, dtype=ta.float64).parameters())
    model = nn.Transformer(E, H, 1, 1, FF)
    out = model(ta.randn(S, B, E), ta.randn(T, B, E), tgt_mask=nn.Transformer.generate_square_subsequent_mask(T))
    out.sum().backward()
    assert out.dtype == np.float32 and all(p.grad.dtype == np.float32 for p in model.parameters())


def test_generate_square_subsequent_mask():
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    expected = np.array([[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]])
    assert mask.dtype == np.float32
    np.testing.assert_array_equal(host(mask), expected)
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype=ta.float64).dtype == np.float64


# -- the documented math in NumPy ------------------------------------------------------------------------------------
def np_layer_norm(x, p, prefix, eps=1e-5):
    centred = x - x.mean(-1, keepdims=True)
    out = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps) * p[prefix + "weight"]
    return out + p.get(prefix + "bias", 0.0)


def np_additive(mask):
    """PyTorch's masks as something added to the scores: bool True (not allowed) -> -inf, a float mask as it is."""
    return np.where(mask, -np.inf, 0.0) if mask.dtype == bool else mask


def np_attention(x, memory, p, prefix, mask, padding):
    """nn.MultiheadAttention on (N, L, E) queries and (N, S, E) keys/values; a row with every key masked gives 0."""
    w, b = p[prefix + "in_proj_weight"], p.get(prefix + "in_proj_bias", np.zeros(3 * E))
    q, k, v = x @ w[:E].T + b[:E], memory @ w[E:2 * E].T + b[E:2 * E], memory @ w[2 * E:].T + b[2 * E:]
    n, length, keys, d = x.shape[0], x.shape[1], memory.shape[1], E // H
    q, k, v = (a.reshape(n, -1, H, d).transpose(0, 2, 1, 3) for a in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if mask is not None:
        scores = scores + np_additive(mask)
    if padding is not None:
        scores = scores + np_additive(padding)[:, None, None, :]
    top = scores.max(-1, keepdims=True)
    e = np.exp(scores - np.where(np.isinf(top), 0.0, top))
    weights = np.divide(e, e.sum(-1, keepdims=True), out=np.zeros_like(e), where=e.sum(-1, keepdims=True) > 0)
    z = (weights @ v).transpose(0, 2, 1, 3).reshape(n, length, E)
    return z @ p[prefix + "out_proj.weight"].T + p.get(prefix + "out_proj.bias", 0.0)


def np_feed_forward(x, p, prefix, activation):
    h = activation(x @ p[prefix + "linear1.weight"].T + p.get(prefix + "linear1.bias", 0.0))
    return h @ p[prefix + "linear2.weight"].T + p.get(prefix + "linear2.bias", 0.0)


def np_sublayer(x, p, norm, norm_first, sublayer):
    if norm_first:
        return x + sublayer(np_layer_norm(x, p, norm))
    return np_layer_norm(x + sublayer(x), p, norm)


def np_transformer(p, src, tgt, norm_first, activation, masks, num_encoder_layers=2, num_decoder_layers=1):
    """Batch-first (N, L, E) in and out."""
    x = src
    for i in range(num_encoder_layers):
        pre = f"encoder.layers.{i}."
        x = np_sublayer(x, p, pre + "norm1.", norm_first, lambda h: np_attention(
            h, h, p, pre + "self_attn.", masks.get("src_mask"), masks.get("src_key_padding_mask")))
        x = np_sublayer(x, p, pre + "norm2.", norm_first, lambda h: np_feed_forward(h, p, pre, activation))
    memory = np_layer_norm(x, p, "encoder.norm.")
    y = tgt
    for i in range(num_decoder_layers):
        pre = f"decoder.layers.{i}."
        y = np_sublayer(y, p, pre + "norm1.", norm_first, lambda h: np_attention(
            h, h, p, pre + "self_attn.", masks.get("tgt_mask"), masks.get("tgt_key_padding_mask")))
        y = np_sublayer(y, p, pre + "norm2.", norm_first, lambda h: np_attention(
            h, memory, p, pre + "multihead_attn.", masks.get("memory_mask"), masks.get("memory_key_padding_mask")))
        y = np_sublayer(y, p, pre + "norm3.", norm_first, lambda h: np_feed_forward(h, p, pre, activation))
    return np_layer_norm(y, p, "decoder.norm.")


def np_relu(x):
    return np.maximum(x, 0.0)


def np_gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def make_masks(kind):
    """Masks of one kind (None, "bool", "float", "padding"), none of them masking a whole row."""
    rng = np.random.default_rng(7)
    if kind is None:
        return {}
    if kind == "padding":
        src_pad, tgt_pad = np.zeros((B, S), bool), np.zeros((B, T), bool)
        src_pad[0, 3:], src_pad[2, 1] = True, True
        tgt_pad[1, 2:] = True
        return {"src_key_padding_mask": src_pad, "tgt_key_padding_mask": tgt_pad, "memory_key_padding_mask": src_pad,
                "tgt_mask": np.triu(np.full((T, T), -np.inf), 1)}
    src, memory = rng.random((S, S)) < 0.3, rng.random((T, S)) < 0.3
    src[np.arange(S), np.arange(S)] = False                       # every query keeps a key
    memory[:, 0] = False
    tgt = np.triu(np.ones((T, T), bool), 1)                       # True: a later position, not allowed
    masks = {"src_mask": src, "tgt_mask": tgt, "memory_mask": memory}
    if kind == "float":
        masks = {name: np.where(m, -np.inf, rng.standard_normal(m.shape)) for name, m in masks.items()}
    return masks


CASES = {                    # name: (constructor arguments, NumPy activation, masks)
    "post_norm_relu": ({}, np_relu, None),
    "pre_norm_gelu": ({"norm_first": True, "activation": "gelu"}, np_gelu, None),
    "callable_activation": ({"activation": ta.tanh}, np.tanh, None),
    "gelu_module": ({"activation": nn.GELU()}, np_gelu, "bool"),
    "bias_false": ({"bias": False}, np_relu, "float"),
    "bool_masks": ({}, np_relu, "bool"),
    "float_masks_pre_norm": ({"norm_first": True}, np_relu, "float"),
    "bool_masks_batch_first": ({"batch_first": True}, np_relu, "bool"),
    "padding": ({}, np_relu, "padding"),
    "padding_batch_first_pre_norm": ({"batch_first": True, "norm_first": True}, np_relu, "padding"),
}


@pytest.mark.parametrize("case", CASES)
def test_output_equals_the_documented_math(case):
    kwargs, activation, kind = CASES[case]
    model = small_transformer(**kwargs)
    params = {name: host(p) for name, p in model.state_dict().items()}
    rng = np.random.default_rng(1)
    src, tgt = rng.standard_normal((B, S, E)), rng.standard_normal((B, T, E))       # batch first
    masks = make_masks(kind)
    if kwargs.get("batch_first"):
        out = host(model(ta.tensor(src), ta.tensor(tgt), **{k: ta.tensor(m) for k, m in masks.items()}))
    else:
        out = host(model(ta.tensor(src.transpose(1, 0, 2)), ta.tensor(tgt.transpose(1, 0, 2)),
                         **{k: ta.tensor(m) for k, m in masks.items()})).transpose(1, 0, 2)
    expected = np_transformer(params, src, tgt, kwargs.get("norm_first", False), activation, masks)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


def test_unbatched_input_equals_one_batch_row():
    model = small_transformer()
    src, tgt = randn(S, B, E, requires_grad=False), randn(T, B, E, requires_grad=False)
    mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=ta.float64)
    pad = ta.tensor(np.array([False, False, False, True, True]))
    batched = host(model(src, tgt, tgt_mask=mask, src_key_padding_mask=pad[None].expand(B, S)))
    single = host(model(src[:, 1], tgt[:, 1], tgt_mask=mask, src_key_padding_mask=pad))
    np.testing.assert_allclose(single, batched[:, 1], rtol=1e-12, atol=1e-14)


def test_a_layer_alone_and_a_stack_without_norm_equal_the_math():
    layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True, dtype=ta.float64)
    encoder = nn.TransformerEncoder(layer, num_layers=2)
    params = {f"encoder.{name}": host(p) for name, p in encoder.state_dict().items()}
    src = np.random.default_rng(2).standard_normal((B, S, E))
    x = src
    for i in range(2):
        pre = f"encoder.layers.{i}."
        x = np_sublayer(x, params, pre + "norm1.", False,
                        lambda h: np_attention(h, h, params, pre + "self_attn.", None, None))
        x = np_sublayer(x, params, pre + "norm2.", False, lambda h: np_feed_forward(h, params, pre, np_relu))
    np.testing.assert_allclose(host(encoder(ta.tensor(src))), x, rtol=1e-10, atol=1e-12)


def test_a_fully_masked_query_gives_finite_output_and_gradients():
    """PyTorch's layers (need_weights=False, its SDPA road) give such a row attention output 0, as here; the masked
    query's value comes from its residual alone."""
    model = small_transformer()
    params = {name: host(p) for name, p in model.state_dict().items()}
    src_mask = np.zeros((S, S), bool)
    src_mask[1] = True
    src, tgt = randn(S, B, E), randn(T, B, E)
    out = model(src, tgt, src_mask=ta.tensor(src_mask))
    out.sum().backward()
    assert np.isfinite(host(out)).all() and np.isfinite(host(src.grad)).all()
    assert all(np.isfinite(host(p.grad)).all() for p in model.parameters())
    expected = np_transformer(params, host(src).transpose(1, 0, 2), host(tgt).transpose(1, 0, 2), False, np_relu,
                              {"src_mask": src_mask})
    np.testing.assert_allclose(host(out).transpose(1, 0, 2), expected, rtol=1e-10, atol=1e-12)


def test_gradcheck_float64():
    model = nn.Transformer(d_model=4, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=6,
                           dropout=0.0, dtype=ta.float64)
    src, tgt = randn(3, 2, 4), randn(2, 2, 4, seed=1)
    mask = nn.Transformer.generate_square_subsequent_mask(2, dtype=ta.float64)
    pad = ta.tensor(np.array([[False, False, True], [False, False, False]]))
    params = list(model.parameters())

    def run(src, tgt, *_):
        return model(src, tgt, tgt_mask=mask, src_key_padding_mask=pad, memory_key_padding_mask=pad)

    assert ta.gradcheck(run, (src, tgt, *params), full_jacobian=False)


# -- is_causal: a hint that the mask given is the causal one -----------------------------------------------------
def test_is_causal_without_a_mask_is_refused_as_pytorch_does():
    layer = nn.TransformerEncoderLayer(E, H, FF)
    with pytest.raises(RuntimeError, match="is_causal"):
        layer(ta.randn(S, B, E), is_causal=True)
    with pytest.raises(RuntimeError, match="is_causal"):
        nn.Transformer(E, H, 1, 1, FF)(ta.randn(S, B, E), ta.randn(T, B, E), tgt_is_causal=True)


def test_is_causal_applies_the_causal_mask_where_pytorch_does():
    """PyTorch's MultiheadAttention, asked for no weights and given no key padding, hands the hint to SDPA and the
    causal mask is the one applied; with weights or padding, the mask given is."""
    mha = nn.MultiheadAttention(E, H).double()
    x = randn(T, B, E, requires_grad=False)
    other = ta.zeros(T, T, dtype=ta.bool)
    other[:, 0] = True                                   # not the causal mask
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=ta.float64)
    with_causal = host(mha(x, x, x, attn_mask=causal, need_weights=False)[0])
    with_other = host(mha(x, x, x, attn_mask=other, need_weights=False)[0])
    assert not np.allclose(with_causal, with_other)
    np.testing.assert_array_equal(host(mha(x, x, x, attn_mask=other, need_weights=False, is_causal=True)[0]),
                                  with_causal)
    np.testing.assert_array_equal(host(mha(x, x, x, attn_mask=other, is_causal=True)[0]), with_other)
    pad = ta.zeros(B, T, dtype=ta.bool)
    np.testing.assert_array_equal(
        host(mha(x, x, x, attn_mask=other, key_padding_mask=pad, need_weights=False, is_causal=True)[0]), with_other)


def test_stacks_given_no_hint_detect_the_causal_mask_as_pytorch_does():
    seen = []

    class Recording(nn.TransformerEncoderLayer):
        def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
            seen.append(is_causal)
            return super().forward(src, src_mask, src_key_padding_mask, is_causal)

    encoder = nn.TransformerEncoder(Recording(E, H, FF), num_layers=1)
    src = ta.randn(S, B, E)
    causal = nn.Transformer.generate_square_subsequent_mask(S)
    encoder(src, mask=causal)
    encoder(src, mask=ta.triu(ta.ones(S, S, dtype=ta.bool), diagonal=1))      # the bool causal mask too
    encoder(src, mask=ta.zeros(S, S))
    encoder(src, mask=causal, is_causal=False)
    encoder(src)
    assert seen == [True, True, False, False, False]


# -- errors ----------------------------------------------------------------------------------------------------------
def test_bad_arguments_raise_clear_errors():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(E, H, activation="tanh")
    with pytest.raises(TypeError, match="activation must be"):
        nn.TransformerDecoderLayer(E, H, activation=3)
    model = nn.Transformer(E, H, 1, 1, FF)
    with pytest.raises(RuntimeError, match=r"batch number of src and tgt must be equal: src \(5, 3, 8\), tgt "
                                           r"\(4, 2, 8\)"):
        model(ta.randn(S, B, E), ta.randn(T, 2, E))
    with pytest.raises(RuntimeError, match=r"feature number of src and tgt must be equal to d_model 8"):
        model(ta.randn(S, B, E), ta.randn(T, B, 6))
    with pytest.raises(RuntimeError, match=r"attn_mask must have shape \(L, S\) = \(4, 4\) .* got \(5, 5\)"):
        model(ta.randn(S, B, E), ta.randn(T, B, E), tgt_mask=ta.zeros(S, S))
    with pytest.raises(RuntimeError, match="only bool and floating types of attn_mask are supported, got int64"):
        model(ta.randn(S, B, E), ta.randn(T, B, E), tgt_mask=ta.zeros(T, T, dtype=ta.int64))


# -- word_language_model's subclass ----------------------------------------------------------------------------------
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = ta.zeros(max_len, d_model)
        position = ta.arange(0, max_len, dtype=ta.float32).unsqueeze(1)
        div_term = ta.exp(ta.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = ta.sin(position * div_term)
        pe[:, 1::2] = ta.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0), :])


class TransformerModel(nn.Transformer):
    """pytorch/examples word_language_model's model: nn.Transformer's encoder, its decoder replaced by a Linear."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        nn.init.uniform_(self.input_emb.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def _generate_square_subsequent_mask(self, sz):
        mask = (ta.triu(ta.ones(sz, sz)) == 1).transpose(0, 1)
        return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))

    def forward(self, src, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        else:
            self.src_mask = None
        src = self.pos_encoder(self.input_emb(src) * math.sqrt(self.ninp))
        return F.log_softmax(self.decoder(self.encoder(src, mask=self.src_mask)), dim=-1)


def test_word_language_model_subclass_replaces_the_decoder_and_trains():
    model = TransformerModel(ntoken=11, ninp=8, nhead=2, nhid=16, nlayers=2, dropout=0.0)
    keys = list(model.state_dict())
    assert not [k for k in keys if k.startswith("decoder.layers")] and "decoder.weight" in keys
    assert "encoder.layers.1.self_attn.in_proj_weight" in keys and "pos_encoder.pe" in keys
    tokens = ta.tensor(np.random.default_rng(3).integers(0, 11, (6, 2)))           # (length, batch)
    output = model(tokens)
    assert output.shape == (6, 2, 11)
    np.testing.assert_array_equal(host(model.src_mask), host(nn.Transformer.generate_square_subsequent_mask(6)))
    loss = F.nll_loss(output[:-1].reshape(-1, 11), tokens[1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None and np.isfinite(host(p.grad)).all() for p in model.parameters())
    model.eval()                            # (nn.Transformer's own dropout, 0.1: the subclass does not pass it)
    changed = tokens.clone()
    changed[3:] = (changed[3:] + 1) % 11    # the mask is causal: the first three outputs do not see the change
    with ta.no_grad():
        first, second = host(model(tokens)), host(model(changed))
    np.testing.assert_allclose(second[:3], first[:3], rtol=1e-5, atol=1e-6)
    assert not np.allclose(second[3:], first[3:], rtol=1e-5, atol=1e-6)
