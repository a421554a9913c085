"""The residual stream read: the decomposition's parts are the hand-written forward's and add up to the final
residual; the logit lens is the final LayerNorm and unembedding on each layer's residual; direct logit attribution
is the change in the logit difference when a part's output is taken out of a model whose final LayerNorm is
frozen."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import interpret, nn, viz
from test_interpret_points import by_hand, gpt, ids


def layer_norm(x, model, scale=None):
    centred = x - x.mean(-1, keepdims=True)
    scale = np.sqrt(centred.var(-1, keepdims=True) + 1e-5) if scale is None else scale
    return centred / scale * model.ln_f.weight.numpy() + model.ln_f.bias.numpy()


def test_the_parts_are_the_hand_written_forwards_and_add_up_to_the_final_residual():
    model, x = gpt(), ids()
    _, points = by_hand(model, x)
    parts = interpret.decompose_residual(model, x)
    assert parts.labels == (["embed", "pos"] + [f"L0H{h}" for h in range(4)] + ["L0 attn bias", "L0 mlp"]
                            + [f"L1H{h}" for h in range(4)] + ["L1 attn bias", "L1 mlp"])
    tokens = x.numpy()
    assert np.allclose(parts.components[0], model.tok_emb.weight.numpy()[tokens], atol=0)
    assert np.allclose(parts.components[1], model.pos_emb.weight.numpy()[:9], atol=0)
    assert np.allclose(parts.components[parts.index("L1H2")], points["blocks.1.attn.hook_result"][:, :, 2])
    assert np.allclose(parts.components[parts.index("L0 mlp")], points["blocks.0.hook_mlp_out"])
    assert np.allclose(parts.components[parts.index("L1 attn bias")], model.blocks[1].attn.out_proj.bias.numpy())
    assert np.allclose(parts.residual, points["blocks.1.hook_resid_post"], atol=1e-12)
    assert parts.error() <= 1e-12
    single = gpt().float()
    parts32 = interpret.decompose_residual(single, x)
    assert parts32.components.dtype == np.float32 and parts32.error() <= 1e-6
    with pytest.raises(ValueError, match="training mode"):
        interpret.decompose_residual(gpt().train(), x)


@pytest.mark.parametrize("scale", ["own", "final"])
def test_the_logit_lens_is_the_final_norm_and_unembedding_on_each_layers_residual(scale):
    model, x = gpt(), ids()
    logits, points = by_hand(model, x)
    lens = interpret.logit_lens(model, x, scale=scale)
    assert lens.shape == (3, 2, 9, 11)
    final = points["ln_f.hook_scale"] if scale == "final" else None
    residuals = [points["blocks.0.hook_resid_pre"], points["blocks.0.hook_resid_post"],
                 points["blocks.1.hook_resid_post"]]
    w_u = model.head.weight.numpy()
    for row, residual in zip(lens, residuals):
        assert np.allclose(row, layer_norm(residual, model, final) @ w_u.T, atol=1e-10)
    assert np.allclose(lens[-1], logits, atol=1e-10)              # at the end, either scale is the run's own


@pytest.mark.parametrize("mlp", ["gelu", "none"])
def test_direct_logit_attribution_is_the_change_when_a_part_is_taken_out_under_a_frozen_final_norm(mlp):
    model, x = gpt(mlp=mlp), ids()
    a, b = np.array([3, 5]), np.array([7, 7])
    dla, labels = interpret.direct_logit_attribution(model, x, a, baseline=b)
    w_u = model.head.weight.numpy()
    difference = lambda logits: logits[np.arange(2), -1, a] - logits[np.arange(2), -1, b]
    with ta.no_grad():
        base = difference(model(x).numpy())
    assert np.allclose(dla.sum(0) + (w_u[a] - w_u[b]) @ model.ln_f.bias.numpy(), base, atol=1e-10)
    parts = interpret.decompose_residual(model, x)
    frozen = {"ln_f.hook_scale": lambda s: ta.tensor(parts.scale)}
    last = f"blocks.{model.config.n_layer - 1}.hook_resid_post"
    for i, label in enumerate(labels):
        taken_out = {**frozen, last: lambda r: r - ta.tensor(parts.components[i])}
        with ta.no_grad(), interpret.intervene(model, taken_out):
            changed = difference(model(x).numpy())
        assert np.allclose(base - changed, dla[i], atol=1e-10), label
    if mlp == "none":                    # a last-layer head's output feeds nothing but the final norm: ablate it
        for h in range(4):
            with ta.no_grad(), interpret.intervene(model, frozen), interpret.ablate_heads(model, {"blocks.1.attn": h}):
                changed = difference(model(x).numpy())
            assert np.allclose(base - changed, dla[labels.index(f"L1H{h}")], atol=1e-10)
    single, _ = interpret.direct_logit_attribution(model, x, 4)               # one logit
    assert np.allclose(single.sum(0) + w_u[4] @ model.ln_f.bias.numpy(), model(x).numpy()[:, -1, 4], atol=1e-10)


@pytest.mark.parametrize("over", ["heads", "positions"])
def test_a_patching_sweep_is_the_metric_of_the_hand_written_forward_with_that_piece_from_the_clean_run(over):
    model, clean, corrupted = gpt(), ids(seed=1), ids(seed=2)
    metric = lambda logits: (logits[:, -1, 3] - logits[:, -1, 7]).mean()
    effect = interpret.patching_sweep(model, clean, corrupted, metric, over=over)
    _, points = by_hand(model, clean)
    assert effect.shape == ((2, 4) if over == "heads" else (2, 9))
    for layer in range(2):
        for i in range(effect.shape[1]):
            if over == "heads":
                name = f"blocks.{layer}.attn.hook_z"
                change = lambda z: np.concatenate([z[:, :, :i], points[name][:, :, i:i + 1], z[:, :, i + 1:]], 2)
            else:
                name = f"blocks.{layer}.hook_resid_pre"
                change = lambda r: np.concatenate([r[:, :i], points[name][:, i:i + 1], r[:, i + 1:]], 1)
            logits = by_hand(model, corrupted, {name: change})[0]
            assert np.isclose(effect[layer, i], (logits[:, -1, 3] - logits[:, -1, 7]).mean(), atol=1e-10)
    with pytest.raises(ValueError, match=r"one shape to patch between them, got \(2, 9\) and \(2, 7\)"):
        interpret.patching_sweep(model, clean, ids(length=7), metric)
    no_attention = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 11))
    with pytest.raises(ValueError, match="Sequential has no attention whose heads can be patched .*over='positions'"):
        interpret.patching_sweep(no_attention, clean, corrupted, metric)
    figure = viz.patching_map(effect, "head" if over == "heads" else "position", title="patching")
    assert len(figure.axes) == 2                                   # the map and its colour bar
    viz.plt.close(figure)
