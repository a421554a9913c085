"""Activation points: not children (state_dict unchanged), each recorded value is what a GPT written out by hand in
NumPy computes there (on every attention path), an intervention at a point changes what the hand-written forward
says it changes, and gradients kept at a point match finite differences."""
import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import interpret, models, nn
from tinyattn.interpret import points as points_module

ERF = np.vectorize(math.erf)
ROOT = Path(__file__).resolve().parents[1]


def gpt(**changes):
    ta.manual_seed(0)
    config = {**dict(vocab_size=11, block_size=16, n_layer=2, num_heads=4, d_model=16), **changes}
    return models.GPT(models.GPTConfig(**config)).double().eval()


def ids(batch=2, length=9, seed=0):
    return ta.tensor(np.random.default_rng(seed).integers(0, 11, (batch, length)))


def by_hand(model, tokens, change=None):
    """The logits of a pre-norm GPT (learned positions, GELU MLP) in NumPy, and {point: value} at every point;
    change {point: f(value) -> value} replaces a value where the forward passes it."""
    change = change or {}
    p = {name: w.numpy() for name, w in model.named_parameters()}
    points = {}

    def at(name, value):
        value = change[name](value.copy()) if name in change else value
        points[name] = value
        return value

    def layer_norm(x, prefix):
        centred = x - x.mean(-1, keepdims=True)
        scale = at(f"{prefix}.hook_scale", np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5))
        return centred / scale * p[f"{prefix}.weight"] + p[f"{prefix}.bias"]

    tokens = tokens.numpy()
    b, t = tokens.shape
    h = model.config.num_heads
    x = at("hook_embed", p["tok_emb.weight"][tokens]) + p["pos_emb.weight"][:t]
    for layer in range(model.config.n_layer):
        a = f"blocks.{layer}"
        x = at(f"{a}.hook_resid_pre", x)
        qkv = layer_norm(x, f"{a}.ln1") @ p[f"{a}.attn.qkv.weight"].T + p[f"{a}.attn.qkv.bias"]
        q, k, v = (part.reshape(b, t, h, -1).transpose(0, 2, 1, 3) for part in np.split(qkv, 3, axis=-1))
        q, k, v = (at(f"{a}.attn.hook_{n}", m) for n, m in (("q", q), ("k", k), ("v", v)))
        scores = np.where(np.tri(t, dtype=bool), q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]), -np.inf)
        scores = at(f"{a}.attn.hook_attn_scores", scores)
        pattern = np.exp(scores - scores.max(-1, keepdims=True))
        pattern = at(f"{a}.attn.hook_pattern", pattern / pattern.sum(-1, keepdims=True))
        z = at(f"{a}.attn.hook_z", (pattern @ v).transpose(0, 2, 1, 3))                   # (B, T, H, dh)
        w_o = p[f"{a}.attn.out_proj.weight"]                                               # (D, D) = (out, in)
        result = np.stack([z[:, :, i] @ w_o[:, i * z.shape[-1]:(i + 1) * z.shape[-1]].T for i in range(h)], 2)
        result = at(f"{a}.attn.hook_result", result)
        x = at(f"{a}.hook_resid_mid", x + at(f"{a}.hook_attn_out", result.sum(2) + p[f"{a}.attn.out_proj.bias"]))
        pre = at(f"{a}.mlp.hook_pre", layer_norm(x, f"{a}.ln2") @ p[f"{a}.mlp.fc1.weight"].T + p[f"{a}.mlp.fc1.bias"])
        post = at(f"{a}.mlp.hook_post", 0.5 * pre * (1.0 + ERF(pre / np.sqrt(2.0))))
        x = at(f"{a}.hook_resid_post", x + at(f"{a}.hook_mlp_out", post @ p[f"{a}.mlp.fc2.weight"].T
                                                + p[f"{a}.mlp.fc2.bias"]))
    return layer_norm(x, "ln_f") @ p["head.weight"].T, points


def test_points_are_no_children_and_change_nothing_a_model_saves_or_lists():
    model = gpt()
    assert not any("hook" in name for name, _ in model.named_modules())
    assert not any("hook" in key for key in model.state_dict())
    names = interpret.point_names(model)
    assert names[:3] == ["hook_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_attn_out"]
    assert "blocks.1.attn.hook_result" in names and "ln_f.hook_scale" in names and "blocks.0.mlp.hook_post" in names
    assert all(isinstance(p, nn.HookPoint) for p in nn.hook_point.named_points(model).values())


@pytest.mark.parametrize("impl", ["sdpa", "flash", "reference"])
def test_every_recorded_point_is_what_the_hand_written_forward_computes_there(impl):
    model, x = gpt(impl=impl), ids()
    plain = model(x).numpy()
    expected_logits, expected = by_hand(model, x)
    assert np.allclose(plain, expected_logits, atol=1e-10)
    with ta.no_grad(), interpret.record(model, interpret.point_names(model)) as cache:
        logits = model(x).numpy()
    assert np.allclose(logits, plain, atol=1e-12)                 # the points written out compute the same
    assert set(cache) == set(expected)
    for name, value in expected.items():
        assert cache[name].shape == value.shape, name
        assert np.allclose(cache[name].numpy(), value, atol=1e-10), name


def test_transformerlens_names_are_aliases():
    model, x = gpt(), ids()
    with ta.no_grad(), interpret.record(model, ["ln_final.hook_scale", "blocks.0.attn.hook_pattern"]) as cache:
        model(x)
    assert np.allclose(cache["ln_final.hook_scale"].numpy(), by_hand(model, x)[1]["ln_f.hook_scale"], atol=1e-12)
    with pytest.raises(KeyError, match=r"no submodule 'blocks.0.attn.hook_patern'; the nearest names: "
                                       r"'blocks.0.attn.hook_pattern'"):
        with interpret.record(model, ["blocks.0.attn.hook_patern"]):
            pass


def test_intervening_on_the_pattern_at_one_position_and_on_a_frozen_scale_changes_what_follows():
    model, x, other = gpt(impl="flash"), ids(), ids(seed=5)
    uniform = lambda pattern: interpret.replace_at(pattern, ta.tensor(np.tri(9)[None, None, 4] / 5.0), 2, [4])
    with ta.no_grad(), interpret.intervene(model, {"blocks.1.attn.hook_pattern": uniform}):
        logits = model(x).numpy()

    def uniform_by_hand(pattern):
        pattern[:, :, 4] = np.tri(9)[4] / 5.0                  # query 4 attends evenly to keys 0..4
        return pattern
    assert np.allclose(logits, by_hand(model, x, {"blocks.1.attn.hook_pattern": uniform_by_hand})[0], atol=1e-10)
    assert not np.allclose(logits, model(x).numpy(), atol=1e-4)
    scale = by_hand(model, other)[1]["ln_f.hook_scale"]         # the final LayerNorm frozen at another run's scale
    with ta.no_grad(), interpret.intervene(model, {"ln_f.hook_scale": lambda s: ta.tensor(scale)}):
        frozen = model(x).numpy()
    assert np.allclose(frozen, by_hand(model, x, {"ln_f.hook_scale": lambda s: scale})[0], atol=1e-10)
    with pytest.raises(TypeError, match="intervene takes a function per point; 'ln_f.hook_scale' got float"):
        with interpret.intervene(model, {"ln_f.hook_scale": 1.0}):
            pass
    with pytest.raises(TypeError, match=r"an index along dim 2 must be an integer, got 4.5 \(float\)"):
        interpret.replace_at(ta.tensor(np.zeros((1, 2, 9, 9))), 1.0, 2, [4.5])
    assert sum(len(p._forward_hooks) for p in nn.hook_point.named_points(model).values()) == 0


def test_gradients_kept_at_a_point_match_finite_differences():
    model, x = gpt(), ids()
    point = "blocks.0.hook_resid_mid"

    def metric(logits):                                          # a logit difference at the last position
        return logits[:, -1, 3] - logits[:, -1, 7]
    with interpret.record(model, [point, "blocks.1.attn.hook_z"], keep_graph=True) as cache:
        metric(model(x)).sum().backward()
    gradient = cache[point].grad.numpy()
    assert gradient.shape == (2, 9, 16) and np.abs(gradient).max() > 0
    rng, eps = np.random.default_rng(1), 1e-6
    for _ in range(3):
        direction = rng.standard_normal(gradient.shape)

        def shifted(sign):
            with ta.no_grad(), interpret.intervene(model, {point: lambda r: r + ta.tensor(sign * eps * direction)}):
                return metric(model(x)).numpy().sum()
        numeric = (shifted(1) - shifted(-1)) / (2 * eps)
        assert np.isclose((gradient * direction).sum(), numeric, rtol=1e-6, atol=1e-8)
    assert cache["blocks.1.attn.hook_z"].grad.shape == (2, 9, 4, 4)


def test_a_vit_has_the_residual_points_and_they_add_up():
    ta.manual_seed(0)
    model = models.ViT(models.ViTConfig(image_size=8, patch_size=4, d_model=16, depth=2, num_heads=2)).double().eval()
    names = ["blocks.0.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.0.hook_resid_mid", "blocks.0.hook_mlp_out",
             "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.1.attn.hook_result", "norm.hook_scale"]
    with ta.no_grad(), interpret.record(model, names + ["blocks.1.attn"]) as cache:
        model(ta.randn(2, 1, 8, 8).double())
    c = {name: cache[name].numpy() for name in names}
    assert np.allclose(c["blocks.0.hook_resid_mid"], c["blocks.0.hook_resid_pre"] + c["blocks.0.hook_attn_out"])
    assert np.allclose(c["blocks.0.hook_resid_post"], c["blocks.0.hook_resid_mid"] + c["blocks.0.hook_mlp_out"])
    assert np.array_equal(c["blocks.0.hook_resid_post"], c["blocks.1.hook_resid_pre"])
    bias = model.blocks[1].attn.out_proj.bias.numpy()
    assert np.allclose(c["blocks.1.attn.hook_result"].sum(2) + bias, cache["blocks.1.attn"].numpy(), atol=1e-12)
    assert c["norm.hook_scale"].shape == (2, 5, 1)


def test_a_row_with_every_key_masked_gives_zero_weights_in_the_open_as_on_the_fused_paths():
    ta.manual_seed(0)
    attention = nn.Attention(8, 2).double()
    x = ta.randn(2, 4, 8).double().requires_grad_()
    padding = ta.tensor(np.array([[False, False, True, False], [True, True, True, True]]))   # sequence 1: all padding
    fused = attention(x, key_padding_mask=padding)
    with interpret.record(attention, ["hook_pattern"], keep_graph=True) as cache:
        opened = attention(x, key_padding_mask=padding)
    assert np.allclose(opened.numpy(), fused.numpy(), atol=1e-12) and not np.isnan(opened.numpy()).any()
    assert np.array_equal(cache["hook_pattern"].numpy()[1], np.zeros((2, 4, 4)))
    opened.sum().backward()
    assert not np.isnan(x.grad.numpy()).any()


# -- the points table (interpret.points.POINTS) and what is held to it ------------------------------------------------
def kind(name):
    return name.rsplit(".", 1)[-1]                                  # "blocks.0.attn.hook_q" -> "hook_q"


FAMILIES = {                                                         # every model family, small; those without a point
    "GPT": lambda: models.GPT(models.GPTConfig(vocab_size=11, block_size=16, n_layer=2, num_heads=4, d_model=16)),
    "ViT": lambda: models.ViT(models.ViTConfig(image_size=8, patch_size=4, d_model=16, depth=2, num_heads=2)),
    "Transformer": lambda: models.Transformer(models.TransformerConfig(src_vocab=7, tgt_vocab=7)),
    "Captioner": lambda: models.Captioner(models.CaptionerConfig()),
    "MobileFormer": lambda: models.MobileFormer(models.MobileFormerConfig()),
    "Swin": lambda: models.Swin(models.SwinConfig()),
    "MLPMixer": lambda: models.MLPMixer(models.MixerConfig()),
    "LocalAttentionCNN": lambda: models.LocalAttentionCNN(models.LocalAttentionCNNConfig()),     # have none)
    "SmallCNN": lambda: models.SmallCNN(models.CNNConfig()),
    "Seq2SeqAttention": lambda: models.Seq2SeqAttention(models.Seq2SeqConfig(src_vocab=7, tgt_vocab=7)),
    "PyTorch's nn.MultiheadAttention": lambda: nn.Sequential(nn.MultiheadAttention(8, 2)),
}


def test_the_points_table_is_a_gpts_points_with_their_shapes_and_names_every_kind_a_model_family_has():
    model = gpt(num_kv_heads=2, mlp_hidden=24)                     # kv_heads, hidden and D all differ
    expected = {name.format(l=layer) for name, *_ in interpret.POINTS for layer in range(2)}
    assert set(interpret.point_names(model)) == expected
    with ta.no_grad(), interpret.record(model, interpret.point_names(model)) as cache:
        model(ids(batch=3, length=7))
    sizes = dict(B=3, T=7, S=7, D=16, heads=4, kv_heads=2, head_dim=4, hidden=24)
    for name, shape, *_ in interpret.POINTS:
        size = tuple(int(d) if d.isdigit() else sizes[d] for d in shape.strip("()").split(", "))
        assert cache[name.format(l=1)].shape == size, name
    kinds = {kind(name) for name, *_ in interpret.POINTS}
    for family, build in FAMILIES.items():
        unknown = {kind(name) for name in interpret.point_names(build())} - kinds
        assert not unknown, f"{family} has points the table does not name: {unknown}"


def site_hooks():
    """docs/site_hooks.py, which makes docs/interpret.md's points table from POINTS when the site is built."""
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "site_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_docstring_and_the_docs_give_the_points_table():
    lines = points_module.__doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == ["point", "shape", "what", "flows", "there"])
    rows = [tuple(re.split(r"\s{2,}", line.strip())) for line in lines[start + 1:]]
    assert rows[:rows.index(("",))] == [row[:3] for row in interpret.POINTS]
    page = site_hooks().points_beside_transformer_lens((ROOT / "docs" / "interpret.md").read_text())
    table = page[page.index("## Beside TransformerLens"):].split("\n\n")[2]           # the points' table
    documented = {}
    for row in table.splitlines()[2:]:
        names, ours = row.split(" | ")[0:2]
        if not ours.startswith("no point"):
            for name in re.findall(r"`([^`]+)`", names):
                documented[kind(name)] = ours[:ours.index(")") + 1]
    assert documented == {kind(name): shape for name, shape, _, _ in interpret.POINTS}
    assert all(theirs for _, _, _, theirs in interpret.POINTS)               # each says what TransformerLens has


@pytest.mark.parametrize("batch_first", [True, False])
def test_pytorchs_multihead_attention_has_the_same_points_and_its_heads_results_add_up(batch_first):
    ta.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    nn.init.normal_(attention.out_proj.bias)
    assert attention.hook_point_names == nn.Attention(8, 2).hook_point_names
    x = ta.randn(3, 5, 8, dtype=ta.float64)
    out, averaged = attention(x, x, x)                            # need_weights=True (PyTorch's default) keeps them
    with ta.no_grad(), interpret.record(attention, ["hook_result", "hook_pattern"]) as cache:
        hooked, _ = attention(x, x, x)
    assert np.allclose(hooked.numpy(), out.numpy(), atol=1e-12)
    heads_sum = cache["hook_result"].sum(dim=2) + attention.out_proj.bias                     # (N, L, E)
    assert cache["hook_result"].shape == (3 if batch_first else 5, 5 if batch_first else 3, 2, 8)
    assert np.allclose(heads_sum.numpy(), (out if batch_first else out.transpose(0, 1)).numpy(), atol=1e-12)
    assert np.array_equal(attention.last_weights.numpy(), cache["hook_pattern"].numpy())
    assert np.allclose(attention.last_weights.mean(dim=1).numpy(), averaged.numpy(), atol=1e-12)
