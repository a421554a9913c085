"""Every model family: output shapes, a float64 gradcheck of a tiny instance, overfitting a tiny batch, flash equal
to sdpa where there is attention, and float32 training that never promotes."""
import dataclasses
import json

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim
from conftest import host


def tiny_gpt(**overrides):
    config = dict(vocab_size=17, block_size=16, n_layer=2, num_heads=4, d_model=16)
    return models.GPT(models.GPTConfig(**{**config, **overrides}))


def images(b=4, c=1, size=8):
    return ta.randn(b, c, size, size)


VISION = {
    "vit": lambda: models.ViT(models.ViTConfig(image_size=8, patch_size=4, d_model=16, depth=2, num_heads=2,
                                              num_classes=3)),
    "vit-mean-sincos": lambda: models.ViT(models.ViTConfig(image_size=8, patch_size=2, d_model=16, depth=1,
                                                          num_heads=2, num_classes=3, pool="mean",
                                                          position="sincos2d")),
    "swin": lambda: models.Swin(models.SwinConfig(image_size=8, patch_size=1, embed_dim=8, depths=(2, 1),
                                                 num_heads=(2, 2), window_size=4, num_classes=3)),
    "mixer": lambda: models.MLPMixer(models.MixerConfig(image_size=8, patch_size=4, d_model=16, depth=2,
                                                       num_classes=3)),
    "cnn": lambda: models.SmallCNN(models.CNNConfig(width=4, num_classes=3)),
    "cnn-attention": lambda: models.SmallCNN(models.CNNConfig(width=4, num_classes=3, attention=True)),
}


def _train(model, loss_fn, steps, lr=0.01):
    opt = optim.Adam(model.parameters(), lr=lr)
    first = None
    for _ in range(steps):
        loss = loss_fn()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return first, loss.item()


@pytest.mark.parametrize("name", VISION)
def test_vision_models_shape_gradcheck_and_overfit(name):
    ta.manual_seed(0)
    model = VISION[name]()
    x, y = images(), ta.tensor([0, 1, 2, 1])
    assert model(x).shape == (4, 3) and model.num_parameters() > 0
    first, last = _train(model, lambda: F.cross_entropy(model(x), y), 60)
    assert last < 0.1 * first, (first, last)
    for p in model.parameters():
        assert p.dtype == np.float32 and p.grad.dtype == np.float32
    model.double()
    xd = ta.tensor(host(x).astype(np.float64), requires_grad=True)
    assert ta.gradcheck(lambda x, *ps: model(x), (xd, *model.parameters()), full_jacobian=False, directions=1)


def test_swin_shifts_alternate_and_merging_halves_the_grid():
    model = models.Swin(models.SwinConfig(image_size=16, patch_size=2, embed_dim=8, depths=(2, 2),
                                          num_heads=(2, 2), window_size=4))
    first_stage = model.stages[0]
    assert [block.shift for block in first_stage[:2]] == [0, 2]
    assert first_stage[2].resolution == 8 and model.stages[1][0].resolution == 4
    assert model(ta.randn(2, 1, 16, 16)).shape == (2, 10)


def test_vit_attention_maps_flash_and_distillation():
    config = dict(image_size=8, patch_size=4, d_model=16, depth=2, num_heads=2, num_classes=3)
    vit = models.ViT(models.ViTConfig(**config))
    x = images()
    logits, maps = vit(x, return_attention=True)
    assert len(maps) == 2 and maps[0].shape == (4, 2, 5, 5)
    np.testing.assert_allclose(host(maps[1]).sum(-1), 1.0, rtol=1e-5)
    flash = models.ViT(models.ViTConfig(impl="flash", **config))
    flash.load_state_dict(vit.state_dict())
    np.testing.assert_allclose(host(flash(x)), host(logits), atol=1e-5)
    distances = models.mean_attention_distance(maps[0], grid=2, patch_size=4)
    assert distances.shape == (2,) and (0 <= distances).all() and (distances <= 4 * np.sqrt(2)).all()
    deit = models.ViT(models.ViTConfig(distillation=True, **config))
    cls_logits, dist_logits = deit(x)
    teacher = ta.randn(4, 3)
    loss = models.deit_hard_distillation_loss(cls_logits, dist_logits, ta.tensor([0, 1, 2, 0]), teacher)
    expected = 0.5 * F.cross_entropy(cls_logits, ta.tensor([0, 1, 2, 0])).item() + \
        0.5 * F.cross_entropy(dist_logits, ta.tensor(host(teacher).argmax(-1))).item()
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    deit.eval()
    np.testing.assert_allclose(host(deit(x)), (host(cls_logits) + host(dist_logits)) / 2, atol=1e-5)


@pytest.mark.parametrize("overrides", [{}, {"norm": "rms", "mlp": "swiglu"}, {"mlp": "moe", "num_kv_heads": 2},
                                       {"num_kv_heads": 1, "position": "rope"}, {"tie_weights": True},
                                       {"prenorm": False}, {"mlp": "none"},
                                       {"activation": "gelu_tanh", "mlp_hidden": 24}])
def test_gpt_variants_overfit_and_flash_matches(overrides):
    ta.manual_seed(0)
    model = tiny_gpt(**overrides)
    ids = ta.randint(0, 17, (4, 13))
    logits, loss = model(ids[:, :-1], ids[:, 1:])
    assert logits.shape == (4, 12, 17)
    flash = tiny_gpt(impl="flash", **overrides)
    flash.load_state_dict(model.state_dict())
    np.testing.assert_allclose(host(flash(ids[:, :-1])), host(logits), atol=1e-5)
    first, last = _train(model, lambda: model(ids[:, :-1], ids[:, 1:])[1] + 0.01 * model.aux_loss(), 80)
    assert last < 0.1 * first, (first, last)


def test_gpt_attention_only_has_no_feed_forward_and_settings_reach_the_layers():
    plain = tiny_gpt(mlp="none")
    assert not any(".mlp." in name or ".ln2." in name for name, _ in plain.named_parameters())
    x = ta.randn(2, 5, plain.config.d_model)
    block = plain.blocks[0]
    expected = x + block.attn(block.ln1(x), is_causal=True)                # the block is its attention alone
    np.testing.assert_allclose(host(block(x)), host(expected), atol=1e-6)
    tuned = tiny_gpt(activation="relu", mlp_hidden=7, norm_eps=1e-3)
    assert tuned.blocks[0].mlp.fc1.weight.shape == (7, tuned.config.d_model)
    assert isinstance(tuned.blocks[0].mlp.act, ta.nn.ReLU) and tuned.ln_f.eps == 1e-3
    with pytest.raises(ValueError, match="activation must be one of"):
        tiny_gpt(activation="swish")


def test_gpt_gradcheck_float64():
    model = tiny_gpt(n_layer=1, mlp="swiglu", norm="rms").double()
    ids = ta.randint(0, 17, (2, 6))
    assert ta.gradcheck(lambda *ps: model(ids[:, :-1], ids[:, 1:])[1], tuple(model.parameters()),
                        full_jacobian=False, directions=2)


def test_gpt_generate_with_cache_equals_without_and_parameter_count():
    model = tiny_gpt()
    prompt = ta.randint(0, 17, (2, 3))
    greedy_cached = model.generate(prompt, 10, temperature=0)
    greedy_plain = model.generate(prompt, 10, temperature=0, use_cache=False)
    np.testing.assert_array_equal(host(greedy_cached), host(greedy_plain))
    ta.manual_seed(3)
    sampled = host(model.generate(prompt, 10, temperature=1.0, top_k=5))
    assert sampled.shape == (2, 13) and ((0 <= sampled) & (sampled < 17)).all()
    d, layers = 64, 3
    big = models.GPT(models.GPTConfig(vocab_size=100, block_size=32, n_layer=layers, num_heads=4, d_model=d))
    per_block = sum(p.numel() for p in big.blocks[0].parameters())
    assert 12 * d * d <= per_block <= 12 * d * d + 13 * d       # 12 D^2 weights, plus biases and norms
    matmul_params = big.num_parameters() - 100 * d - 32 * d
    assert big.flops_per_token(32) == 6 * matmul_params + 12 * layers * 32 * d
    moe = models.GPT(models.GPTConfig(vocab_size=100, block_size=32, n_layer=layers, num_heads=4, d_model=d, mlp="moe",
                                      n_experts=4, top_k=2))
    expert = moe.blocks[0].mlp.experts[0].num_parameters()
    assert moe.flops_per_token(32) == 6 * (moe.num_parameters() - 100 * d - 32 * d - layers * 2 * expert) \
        + 12 * layers * 32 * d                                  # each token skips 2 of the 4 experts


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_cached_generation_past_block_size_gives_the_tokens_of_the_sliding_window(position):
    # transformers and use_cache=False read the last block_size tokens at every step; the cache must give the same
    ta.manual_seed(0)
    model = models.GPT(models.GPTConfig(vocab_size=20, block_size=8, n_layer=1, num_heads=2, d_model=16,
                                        position=position)).eval()
    prompt = ta.randint(0, 20, (2, 8))
    one_more = model.generate(prompt, 1, temperature=0, use_cache=True)        # block_size + 1 tokens
    assert one_more.shape == (2, 9)
    np.testing.assert_array_equal(host(one_more), host(model.generate(prompt, 1, temperature=0, use_cache=False)))
    for total in (7, 8, 9, 24):                                                 # block_size - 1 ... 3 x block_size
        cached = host(model.generate(prompt[:, :3], total - 3, temperature=0, use_cache=True))
        plain = host(model.generate(prompt[:, :3], total - 3, temperature=0, use_cache=False))
        assert cached.shape == (2, total)
        np.testing.assert_array_equal(cached, plain)
    window = host(model.generate(prompt, 1, temperature=0, use_cache=False))   # the 9th token read tokens 1..8
    np.testing.assert_array_equal(window[:, -1], host(model(prompt[:, -8:])).argmax(-1)[:, -1])


def fixed_logits_gpt(logits):
    """A GPT whose next-token logits are `logits` at every position: ln_f outputs its bias, a one-hot, which the
    head maps to one column of its weight."""
    model = tiny_gpt(vocab_size=len(logits)).eval()
    model.ln_f.weight.array[...] = 0
    model.ln_f.bias.array[...] = np.eye(16)[0]
    model.head.weight.array[...] = 0
    model.head.weight.array[:, 0] = np.asarray(logits)
    return model


def test_generate_top_p_keeps_the_smallest_set_reaching_p_and_stops_at_eos():
    # transformers: "only the smallest set of most probable tokens with probabilities that add up to top_p or
    # higher are kept"; probabilities 0.5, 0.3, 0.15, 0.05 with top_p=0.7 keep tokens 0 and 1
    model = fixed_logits_gpt(np.log([0.5, 0.3, 0.15, 0.05]))
    ta.manual_seed(0)
    drawn = host(model.generate(ta.zeros(64, 1, dtype=ta.int64), 4, top_p=0.7))[:, 1:]
    assert set(np.unique(drawn)) == {0, 1}
    assert 0.5 < (drawn == 0).mean() < 0.75                                     # 0.5 / 0.8 of the kept mass
    ta.manual_seed(0)
    assert set(np.unique(host(model.generate(ta.zeros(64, 1, dtype=ta.int64), 4, top_p=0.85)))) == {0, 1, 2}
    # eos_token_id: a sequence stops at its first eos; the others go on; finished ones are padded with pad_token_id
    model = fixed_logits_gpt([0.0, 1.0, 3.0, 2.0])                              # greedy: always token 2
    out = host(model.generate(ta.tensor([[0], [1]]), 5, temperature=0, eos_token_id=2))
    assert out.tolist() == [[0, 2], [1, 2]]                                     # every sequence stopped: done
    out = host(model.generate(ta.tensor([[0, 1]]), 3, temperature=0, eos_token_id=[7, 9]))
    assert out.tolist() == [[0, 1, 2, 2, 2]]                                    # no eos drawn: all 3 tokens
    ta.manual_seed(1)
    model, prompt = tiny_gpt().eval(), ta.randint(0, 17, (2, 3))
    free = host(model.generate(prompt, 6, temperature=0))
    eos = int(free[0, 3])                                                       # row 0's first new token
    stops = host(model.generate(prompt, 6, temperature=0, eos_token_id=eos, pad_token_id=16))
    row1_end = next((i + 1 for i in range(3, 9) if free[1, i] == eos), 9)
    assert stops.shape[1] == row1_end
    assert stops[0, 3:].tolist() == [eos] + [16] * (row1_end - 4)               # stopped, then padded
    assert stops[1].tolist() == free[1, :row1_end].tolist()                     # goes on until its own eos


def test_gpt_rope_settings_shifted_positions_and_a_save_that_keeps_them(tmp_path):
    ta.manual_seed(0)
    model = tiny_gpt(position="rope", rope_theta=500.0, rope_interleaved=True).double().eval()
    assert all(b.attn.rotary.base == 500.0 and b.attn.rotary.interleaved for b in model.blocks)
    ids = ta.randint(0, 17, (2, 6))
    logits = host(model(ids))
    # with RoPE alone a score depends on positions only through m - n: sequences moved along, each by its own
    # amount, read the same; learned positions see the move
    moved = np.arange(6) + np.array([[3], [9]])
    np.testing.assert_allclose(host(model(ids, position_ids=moved)), logits, rtol=1e-10, atol=1e-12)
    learned = tiny_gpt().eval()
    assert not np.allclose(host(learned(ids, position_ids=moved)), host(learned(ids)), atol=1e-4)
    np.testing.assert_array_equal(host(learned(ids, position_ids=np.arange(6))), host(learned(ids)))
    # GPT-2's files cannot hold RoPE (save_pretrained refuses it: test_pretrained.py); the config as JSON beside the
    # weights in safetensors keeps the pairing and theta, which change the logits
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(model.config)))
    ta.save(model.state_dict(), str(tmp_path / "model.safetensors"))
    config = models.GPTConfig(**json.loads((tmp_path / "config.json").read_text()))
    assert config == model.config
    again = models.GPT(config).double().eval()
    again.load_state_dict(ta.load(str(tmp_path / "model.safetensors")))
    np.testing.assert_array_equal(host(again(ids)), logits)
    for change in ({"rope_interleaved": False}, {"rope_theta": 10000.0}):
        other = models.GPT(dataclasses.replace(config, **change)).double().eval()
        other.load_state_dict(model.state_dict())
        assert not np.allclose(host(other(ids)), logits, atol=1e-4), change


def test_crop_block_size_keeps_the_first_positions_and_the_outputs():
    ta.manual_seed(0)
    model = tiny_gpt().eval()
    ids = ta.randint(0, 17, (1, 6))
    before = host(model(ids))
    first = host(model.pos_emb.weight)[:8]
    assert model.crop_block_size(8) is model and model.config.block_size == 8
    np.testing.assert_array_equal(host(model.pos_emb.weight), first)
    np.testing.assert_array_equal(host(model(ids)), before)                     # a context of 6 <= 8: unchanged
    with pytest.raises(ValueError, match="9 positions exceed block_size 8"):
        model(ta.randint(0, 17, (1, 9)))
    with pytest.raises(ValueError, match="crop_block_size takes 1 to block_size=8, got 9"):
        model.crop_block_size(9)
    assert model.generate(ids, 5, temperature=0).shape == (1, 11)             # slides past the cropped window


def test_transformer_post_and_pre_norm_overfit_and_decode():
    for norm_first in (False, True):
        ta.manual_seed(0)
        config = models.TransformerConfig(src_vocab=12, tgt_vocab=12, d_model=16, num_heads=2, n_layers=1,
                                          dropout=0.0, norm_first=norm_first)
        model = models.Transformer(config)
        src = ta.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 0, 0]])
        tgt = ta.tensor([[1, 8, 7, 6, 5, 2], [1, 11, 10, 9, 2, 0]])
        loss_fn = lambda: F.cross_entropy(model(src, tgt[:, :-1]).reshape(-1, 12), tgt[:, 1:].reshape(-1),
                                          ignore_index=0)
        first, last = _train(model, loss_fn, 100)
        assert last < 0.1 * first, (norm_first, first, last)
        ids, maps = model.greedy_decode(src, max_len=5)
        np.testing.assert_array_equal(host(ids)[0], [8, 7, 6, 5, 2])
        assert maps[0].shape == (2, 2, 5, 5)
        assert (host(maps[0])[1, :, :, 3:] == 0).all()          # padded source positions get no attention


def test_transformer_gradcheck_and_padding_does_not_leak():
    config = models.TransformerConfig(src_vocab=9, tgt_vocab=9, d_model=8, num_heads=2, n_layers=1, dropout=0.0)
    model = models.Transformer(config).double()
    src, tgt = ta.tensor([[3, 4, 5, 0]]), ta.tensor([[1, 6, 7]])
    assert ta.gradcheck(lambda *ps: model(src, tgt), tuple(model.parameters()), full_jacobian=False, directions=1)
    longer = ta.tensor([[3, 4, 5, 0, 0, 0]])                    # more padding: the same translation
    np.testing.assert_allclose(host(model(longer, tgt)), host(model(src, tgt)), atol=1e-10)


@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_overfits_and_decodes(attention):
    ta.manual_seed(0)
    config = models.Seq2SeqConfig(src_vocab=10, tgt_vocab=10, embed_dim=8, hidden=16, attention_dim=16)
    model = (models.Seq2SeqAttention if attention else models.Seq2Seq)(config)
    src = ta.tensor([[3, 4, 5, 6], [7, 8, 9, 0], [5, 5, 3, 0]])
    tgt = ta.tensor([[1, 6, 5, 4, 3, 2], [1, 9, 8, 7, 2, 0], [1, 3, 5, 5, 2, 0]])

    def loss_fn():
        logits, _ = model(src, tgt[:, :-1])
        return F.cross_entropy(logits.reshape(-1, 10), tgt[:, 1:].reshape(-1), ignore_index=0)
    first, last = _train(model, loss_fn, 150, lr=0.02)
    assert last < 0.1 * first
    ids, weights = model.greedy_decode(src, max_len=5)
    np.testing.assert_array_equal(host(ids)[0], [6, 5, 4, 3, 2])
    if attention:
        assert weights.shape == (3, 5, 4)
        np.testing.assert_allclose(host(weights).sum(-1), 1.0, rtol=1e-5)
        assert (host(weights)[1:, :, 3] == 0).all()             # padding is never attended to
    else:
        assert weights is None


def test_seq2seq_gradcheck_and_padding_does_not_change_the_encoding():
    config = models.Seq2SeqConfig(src_vocab=8, tgt_vocab=8, embed_dim=4, hidden=5, attention_dim=6)
    model = models.Seq2SeqAttention(config).double()
    src, tgt = ta.tensor([[3, 4, 5, 0]]), ta.tensor([[1, 6, 7]])
    assert ta.gradcheck(lambda *ps: model(src, tgt)[0], tuple(model.parameters()), full_jacobian=False,
                        directions=1)
    short, _ = model.encoder(ta.tensor([[3, 4, 5]]))
    padded, _ = model.encoder(ta.tensor([[3, 4, 5, 0, 0]]))
    np.testing.assert_allclose(host(padded)[:, :3], host(short), atol=1e-12)


def test_captioner_overfits_and_attends_over_patches():
    ta.manual_seed(0)
    config = models.CaptionerConfig(image_height=4, image_width=12, patch_size=4, vocab=8, d_model=16, num_heads=2,
                                    embed_dim=8, hidden=16, attention_dim=16)
    model = models.Captioner(config)
    x = ta.randn(3, 1, 4, 12)
    caps = ta.tensor([[1, 3, 4, 5, 2], [1, 5, 6, 7, 2], [1, 4, 4, 3, 2]])

    def loss_fn():
        logits, _ = model(x, caps[:, :-1])
        return F.cross_entropy(logits.reshape(-1, 8), caps[:, 1:].reshape(-1))
    first, last = _train(model, loss_fn, 120)
    assert last < 0.1 * first
    ids, weights = model.greedy_decode(x, max_len=4)
    np.testing.assert_array_equal(host(ids), host(caps)[:, 1:])
    assert weights.shape == (3, 4, 3)
    model.double()
    xd = ta.tensor(host(x).astype(np.float64), requires_grad=True)
    assert ta.gradcheck(lambda x, *ps: model(x, caps[:, :-1])[0], (xd, *model.parameters()), full_jacobian=False,
                        directions=1)


def test_transformer_flash_equals_sdpa():
    config = dict(src_vocab=12, tgt_vocab=12, d_model=16, num_heads=2, n_layers=2, dropout=0.0)
    sdpa = models.Transformer(models.TransformerConfig(**config))
    flash = models.Transformer(models.TransformerConfig(impl="flash", **config))
    flash.load_state_dict(sdpa.state_dict())
    src, tgt = ta.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 0, 0]]), ta.tensor([[1, 8, 7, 6], [1, 11, 10, 0]])
    np.testing.assert_allclose(host(flash(src, tgt)), host(sdpa(src, tgt)), atol=1e-5)


def test_position_neighbour_similarity_of_a_table_made_to_order():
    grid = 3
    rows, cols = np.divmod(np.arange(grid * grid), grid)
    by_row = np.stack([np.cos(rows), np.sin(rows)], axis=1)               # one vector per row: alike along a row
    right, below, far = models.position_neighbour_similarity(by_row, grid)
    assert right == pytest.approx(1.0) and below < 0.6 and far < right
