"""Circuits from the weights: each head's W_Q, W_K, W_V, W_O are what its forward uses (against the recorded points),
the factored circuits are the products written out in NumPy, composition scores are 1 and 0 on heads built to
compose or not, and the copying score is +1, -1 and 0 on circuits built to copy, to suppress and to rotate; each
setting of fold_ln and the centring gives the scores of TransformerLens's processing steps (reimplemented in NumPy
here); FactoredMatrix multiplies as the whole matrix does."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import interpret, models


def gpt(**changes):
    ta.manual_seed(0)
    config = {**dict(vocab_size=11, block_size=16, n_layer=2, num_heads=4, d_model=16, mlp="none"), **changes}
    return models.GPT(models.GPTConfig(**config)).double().eval()


def test_a_heads_weights_are_what_its_forward_uses():
    model, x = gpt(bias=False, num_kv_heads=2), ta.tensor(np.random.default_rng(0).integers(0, 11, (2, 7)))
    rng = np.random.default_rng(1)
    model.blocks[1].ln1.weight.array[:] = rng.uniform(0.5, 1.5, 16)            # fold_ln has something to fold
    names = ["blocks.1.hook_resid_pre", "blocks.1.ln1.hook_scale", "blocks.1.attn.hook_q", "blocks.1.attn.hook_k",
             "blocks.1.attn.hook_v", "blocks.1.attn.hook_z", "blocks.1.attn.hook_result"]
    with ta.no_grad(), interpret.record(model, names) as cache:
        model(x)
    c = {n.split(".")[-1]: cache[n].numpy() for n in names}
    normalised = (c["hook_resid_pre"] - c["hook_resid_pre"].mean(-1, keepdims=True)) / c["hook_scale"]
    for head in range(4):
        w = interpret.head_weights(model, 1, head)
        assert np.allclose(normalised @ w["W_Q"], c["hook_q"][:, head], atol=1e-12)
        assert np.allclose(normalised @ w["W_K"], c["hook_k"][:, head // 2], atol=1e-12)     # 2 heads share k, v
        assert np.allclose(normalised @ w["W_V"], c["hook_v"][:, head // 2], atol=1e-12)
        assert np.allclose(c["hook_z"][:, :, head] @ w["W_O"], c["hook_result"][:, :, head], atol=1e-12)
    with pytest.raises(IndexError, match="blocks.1.attn has 4 heads"):
        interpret.head_weights(model, 1, 4)


def test_the_circuits_are_the_products_over_tokens_kept_factored():
    model = gpt()
    w, w_e, w_u = interpret.head_weights(model, 1, 2), model.tok_emb.weight.numpy(), model.head.weight.numpy().T
    w_u = w_u * model.ln_f.weight.numpy()[:, None]
    qk = interpret.qk_circuit(model, 1, 2)
    assert qk.shape == (11, 11) and qk.A.shape == (11, 4)
    assert np.allclose(qk.AB, w_e @ w["W_Q"] @ w["W_K"].T @ w_e.T, atol=1e-12)
    ov = interpret.ov_circuit(model, 1, 2)
    assert np.allclose(ov.AB, w_e @ w["W_V"] @ w["W_O"] @ w_u, atol=1e-12)
    some = np.array([1, 4, 6])
    assert np.allclose(interpret.qk_circuit(model, 1, 2, queries=some, keys=some[:2]).AB,
                       qk.AB[np.ix_(some, some[:2])])
    assert np.isclose(ov.norm(), np.linalg.norm(ov.AB))
    full_eigenvalues = np.linalg.eigvals(ov.AB)
    factored = ov.eigenvalues
    assert factored.shape == (4,)                                  # the other 7 of the full matrix's are 0
    assert np.allclose(np.sort_complex(np.round(full_eigenvalues[np.abs(full_eigenvalues) > 1e-9], 8)),
                       np.sort_complex(np.round(factored, 8)))
    assert np.isclose(interpret.copying_score(ov), interpret.copying_score(ov.AB))


def test_the_copying_score_of_heads_built_to_copy_suppress_and_rotate():
    model = gpt(n_layer=1, num_heads=1, d_model=8, bias=False)
    attention = model.blocks[0].attn
    attention.qkv.weight.array[16:] = np.eye(8)                                  # W_V = I
    model.head.weight.array[:] = model.tok_emb.weight.array                       # W_U = W_E^T
    model.ln_f.weight.array[:] = 1.0
    for out_proj, expected in ((np.eye(8), 1.0), (-np.eye(8), -1.0)):
        attention.out_proj.weight.array[:] = out_proj
        assert np.isclose(interpret.copying_score(interpret.ov_circuit(model, 0, 0)), expected)
    rotation = np.array([[0.0, -1.0], [1.0, 0.0]])                               # eigenvalues +-i: sum 0
    assert abs(interpret.copying_score(rotation)) < 1e-12
    with pytest.raises(ValueError, match="the circuit is zero"):
        interpret.copying_score(np.zeros((3, 3)))


def test_composition_scores_of_heads_built_to_compose_through_keys_and_not_through_queries():
    model = gpt(num_heads=2, d_model=8, bias=False)                             # head_dim 4
    for block in model.blocks:
        block.attn.qkv.weight.array[:] = 0.0
        block.attn.out_proj.weight.array[:] = 0.0
    a, b = model.blocks[0].attn, model.blocks[1].attn
    a.qkv.weight.array[16 + 0, 0] = 1.0           # layer 0 head 0: W_V reads dim 0 into its first channel
    a.out_proj.weight.array[5, 0] = 1.0           # and W_O writes that channel to dim 5: W_OV = e0 e5^T
    b.qkv.weight.array[4 + 0, 2] = 1.0            # layer 1 head 1: its query reads dim 2
    b.qkv.weight.array[8 + 4 + 0, 5] = 1.0        # and its key reads dim 5, where head 0.0 writes: W_QK = e2 e5^T
    rng = np.random.default_rng(0)
    b.qkv.weight.array[:4] = rng.standard_normal((4, 8))                       # layer 1 head 0: random q, k, v
    b.qkv.weight.array[8:12] = rng.standard_normal((4, 8))
    b.qkv.weight.array[16:20] = rng.standard_normal((4, 8))
    b.out_proj.weight.array[:, :4] = rng.standard_normal((8, 4))
    k, q, v = (interpret.composition_scores(model, kind) for kind in "KQV")
    assert k.shape == (2, 2, 2, 2) and np.isnan(k[1]).all() and np.isnan(k[0, :, 0]).all()
    assert np.isclose(k[0, 0, 1, 1], 1.0) and q[0, 0, 1, 1] == 0.0 and v[0, 0, 1, 1] == 0.0
    assert k[0, 1, 1, 1] == 0.0                                                  # head 0.1 writes nothing
    p = {name: t.numpy() for name, t in model.named_parameters()}
    ov_a = p["blocks.0.attn.qkv.weight"][16:20].T @ p["blocks.0.attn.out_proj.weight"][:, :4].T   # by hand
    w_q, w_k, w_v = (p["blocks.1.attn.qkv.weight"][s:s + 4].T for s in (0, 8, 16))
    ov_b = w_v @ p["blocks.1.attn.out_proj.weight"][:, :4].T
    frobenius_ratio = lambda l, r: np.linalg.norm(l @ r) / np.linalg.norm(l) / np.linalg.norm(r)
    assert np.isclose(k[0, 0, 1, 0], frobenius_ratio(ov_a, (w_q @ w_k.T).T))
    assert np.isclose(q[0, 0, 1, 0], frobenius_ratio(ov_a, w_q @ w_k.T))
    assert np.isclose(v[0, 0, 1, 0], frobenius_ratio(ov_a, ov_b))
    assert 0.0 < k[0, 0, 1, 0] < 1.0
    with pytest.raises(ValueError, match="kind must be 'Q', 'K' or 'V'"):
        interpret.composition_scores(model, "O")


def transformer_lens_weights(model, fold_ln, center_weights, center_writing_weights, center_unembed):
    """TransformerLens's weight processing (ProcessWeights: fold_layer_norm with its center_weights,
    center_writing_weights, center_unembed), in its layout: W_Q, W_K, W_V (layers, heads, D, dh), W_O (layers,
    heads, dh, D), W_E (vocab, D), W_U (D, vocab)."""
    p = {name: t.numpy() for name, t in model.named_parameters()}
    layers, heads, d = len(model.blocks), model.config.num_heads, model.config.d_model
    qkv = np.stack([p[f"blocks.{l}.attn.qkv.weight"] for l in range(layers)])            # (L, 3D, D)
    w_q, w_k, w_v = (qkv[:, i * d:(i + 1) * d].reshape(layers, heads, -1, d).transpose(0, 1, 3, 2) for i in range(3))
    w_o = np.stack([p[f"blocks.{l}.attn.out_proj.weight"].T.reshape(heads, -1, d) for l in range(layers)])
    w_e, w_u = p["tok_emb.weight"], p["head.weight"].T
    if fold_ln:
        ln1 = np.stack([p[f"blocks.{l}.ln1.weight"] for l in range(layers)])[:, None, :, None]
        w_q, w_k, w_v = w_q * ln1, w_k * ln1, w_v * ln1
        w_u = w_u * p["ln_f.weight"][:, None]
        if center_weights:
            w_q, w_k, w_v = (w - w.mean(2, keepdims=True) for w in (w_q, w_k, w_v))
            w_u = w_u - w_u.mean(0, keepdims=True)
    if center_writing_weights:
        w_e = w_e - w_e.mean(-1, keepdims=True)
        w_o = w_o - w_o.mean(-1, keepdims=True)
    if center_unembed:
        w_u = w_u - w_u.mean(-1, keepdims=True)
    return dict(W_Q=w_q, W_K=w_k, W_V=w_v, W_O=w_o, W_E=w_e, W_U=w_u)


@pytest.mark.parametrize("ours, theirs", [
    (dict(), dict(fold_ln=True, center_weights=False, center_writing_weights=False, center_unembed=False)),
    (dict(center_writing_weights=True, center_unembed=True),                       # TransformerLens's defaults
     dict(fold_ln=True, center_weights=True, center_writing_weights=True, center_unembed=True)),
    (dict(center_writing_weights=True), dict(fold_ln=True, center_weights=True, center_writing_weights=True,
                                             center_unembed=False)),
    (dict(fold_ln=False, center_writing_weights=True), dict(fold_ln=False, center_weights=False,
                                                            center_writing_weights=True, center_unembed=False)),
    (dict(fold_ln=False, center_unembed=True), dict(fold_ln=False, center_weights=False,
                                                    center_writing_weights=False, center_unembed=True))])
def test_each_setting_gives_the_scores_of_transformer_lens_processing_steps(ours, theirs):
    model = gpt(n_layer=3)
    rng = np.random.default_rng(2)
    for name, parameter in model.named_parameters():
        if "ln" in name and name.endswith("weight"):
            parameter.array[:] = rng.uniform(0.5, 1.5, parameter.shape)              # something to fold
    w = transformer_lens_weights(model, **theirs)
    composition = ours.copy()
    center_unembed = composition.pop("center_unembed", False)
    frobenius_ratio = lambda l, r: np.linalg.norm(l @ r) / np.linalg.norm(l) / np.linalg.norm(r)
    for kind in "QKV":
        scores = interpret.composition_scores(model, kind, **composition)
        for l1, h1, l2, h2 in np.ndindex(scores.shape):
            if l1 >= l2:
                assert np.isnan(scores[l1, h1, l2, h2])
                continue
            qk = w["W_Q"][l2, h2] @ w["W_K"][l2, h2].T
            right = {"Q": qk, "K": qk.T, "V": w["W_V"][l2, h2] @ w["W_O"][l2, h2]}[kind]
            expected = frobenius_ratio(w["W_V"][l1, h1] @ w["W_O"][l1, h1], right)
            assert np.isclose(scores[l1, h1, l2, h2], expected, rtol=1e-10, atol=0)
    for layer, head in np.ndindex(3, 4):
        ov = w["W_E"] @ w["W_V"][layer, head] @ w["W_O"][layer, head] @ w["W_U"]
        qk = w["W_E"] @ w["W_Q"][layer, head] @ w["W_K"][layer, head].T @ w["W_E"].T
        circuit = interpret.ov_circuit(model, layer, head, **ours)
        assert np.allclose(circuit.AB, ov, rtol=0, atol=1e-12 * np.abs(ov).max())
        assert np.allclose(interpret.qk_circuit(model, layer, head, **composition).AB, qk, rtol=0,
                           atol=1e-12 * np.abs(qk).max())
        eigenvalues = np.linalg.eigvals(ov)
        assert np.isclose(interpret.copying_score(circuit), eigenvalues.sum().real / np.abs(eigenvalues).sum())
    if ours:                              # and the setting matters here: the scores are not the default's
        assert not np.allclose(interpret.ov_circuit(model, 1, 2, **ours).AB, interpret.ov_circuit(model, 1, 2).AB)


def test_centring_leaves_what_the_heads_read_and_write_as_it_was_and_needs_layer_norm():
    model, x = gpt(bias=False), ta.tensor(np.random.default_rng(0).integers(0, 11, (2, 7)))
    names = ["blocks.1.hook_resid_pre", "blocks.1.ln1.hook_scale", "blocks.1.attn.hook_q",
             "blocks.1.attn.hook_z", "blocks.1.attn.hook_result"]
    with ta.no_grad(), interpret.record(model, names) as cache:
        model(x)
    c = {n.split(".")[-1]: cache[n].numpy() for n in names}
    normalised = (c["hook_resid_pre"] - c["hook_resid_pre"].mean(-1, keepdims=True)) / c["hook_scale"]
    w = interpret.head_weights(model, 1, 3, center_writing_weights=True)
    assert np.allclose(normalised @ w["W_Q"], c["hook_q"][:, 3], atol=1e-12)       # a LayerNorm's output has mean 0
    result = c["hook_result"][:, :, 3]
    assert np.allclose(c["hook_z"][:, :, 3] @ w["W_O"], result - result.mean(-1, keepdims=True), atol=1e-12)
    for changes, found in ((dict(norm="rms"), r"has \['RMSNorm'\]"), (dict(prenorm=False), "has post-norm blocks")):
        with pytest.raises(ValueError, match="center_writing_weights needs pre-norm LayerNorm blocks .*" + found):
            interpret.composition_scores(gpt(**changes), "K", center_writing_weights=True)


def test_a_factored_matrix_multiplies_as_the_whole_matrix_and_keeps_the_smaller_inner_dimension():
    rng = np.random.default_rng(0)
    m = interpret.FactoredMatrix(rng.standard_normal((5, 2)), rng.standard_normal((2, 6)))
    whole = m.A @ m.B
    assert m.shape == (5, 6) and np.allclose(m.AB, whole) and np.allclose(m.T.AB, whole.T)
    right, left = rng.standard_normal((6, 3)), rng.standard_normal((4, 5))
    wide = interpret.FactoredMatrix(rng.standard_normal((3, 6)), rng.standard_normal((6, 4)))    # inner 6 > 4
    products = {"m @ right": (m @ right, whole @ right, 2), "left @ m": (left @ m, left @ whole, 2),
                "m @ m.T": (m @ m.T, whole @ whole.T, 2), "m.T @ m": (m.T @ m, whole.T @ whole, 2),
                "wide @ matrix": (wide @ right[:4], wide.AB @ right[:4], 4),
                "matrix @ wide.T": (right[:4].T @ wide.T, right[:4].T @ wide.AB.T, 4)}
    for name, (product, expected, inner) in products.items():
        assert isinstance(product, interpret.FactoredMatrix) and product.A.shape[1] == inner, name
        assert np.allclose(product.AB, expected), name
    vector = rng.standard_normal(6)
    assert np.allclose(m @ vector, whole @ vector) and np.allclose(vector[:5] @ m, vector[:5] @ whole)
    square = m @ rng.standard_normal((6, 5))                                      # (5, 5), inner 2
    assert square.BA.shape == (2, 2)
    assert np.allclose(np.sort_complex(square.eigenvalues), np.sort_complex(
        [e for e in np.linalg.eigvals(square.AB) if abs(e) > 1e-9]))
    assert np.isclose(square.norm(), np.linalg.norm(square.AB))
    with pytest.raises(ValueError, match=r"FactoredMatrix \(5, 6\) @ needs a vector or matrix with 6 rows on its "
                                         r"right, got shape \(5, 2\)"):
        m @ np.ones((5, 2))
    with pytest.raises(ValueError, match=r"with 5 columns on its left, got shape \(3, 3\)"):
        np.ones((3, 3)) @ m
    with pytest.raises(ValueError, match=r"BA needs a square matrix .* this one is \(5, 6\)"):
        m.BA


def test_arenas_w_e_ov_w_u_is_the_ov_circuit():
    model = gpt()
    w = interpret.head_weights(model, 1, 2)
    w_e, w_u = model.tok_emb.weight.numpy(), model.head.weight.numpy().T * model.ln_f.weight.numpy()[:, None]
    ov = interpret.FactoredMatrix(w["W_V"], w["W_O"])
    circuit = w_e @ ov @ w_u
    assert isinstance(circuit, interpret.FactoredMatrix) and circuit.A.shape[1] == 4
    assert np.allclose(circuit.AB, interpret.ov_circuit(model, 1, 2).AB, atol=1e-12)


def test_a_head_index_must_be_an_integer():
    model = gpt()
    for head in (1.5, True, "1"):
        with pytest.raises(TypeError, match=f"head must be an integer, got {head!r}"):
            interpret.head_weights(model, 1, head)
    assert np.array_equal(interpret.head_weights(model, 1, np.int64(2))["W_O"],
                          interpret.head_weights(model, 1, 2)["W_O"])
