"""Circuits from the weights: each head's W_Q, W_K, W_V, W_O are what its forward uses (against the recorded points),
the factored circuits are the products written out in NumPy, composition scores are 1 and 0 on heads built to
compose or not, and the copying score is +1, -1 and 0 on circuits built to copy, to suppress and to rotate."""
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
    assert qk.shape == (11, 11) and qk.left.shape == (11, 4)
    assert np.allclose(qk.full(), w_e @ w["W_Q"] @ w["W_K"].T @ w_e.T, atol=1e-12)
    ov = interpret.ov_circuit(model, 1, 2)
    assert np.allclose(ov.full(), w_e @ w["W_V"] @ w["W_O"] @ w_u, atol=1e-12)
    some = np.array([1, 4, 6])
    assert np.allclose(interpret.qk_circuit(model, 1, 2, queries=some, keys=some[:2]).full(),
                       qk.full()[np.ix_(some, some[:2])])
    assert np.isclose(ov.norm(), np.linalg.norm(ov.full()))
    full_eigenvalues = np.linalg.eigvals(ov.full())
    factored = ov.eigenvalues()
    assert factored.shape == (4,)                                  # the other 7 of the full matrix's are 0
    assert np.allclose(np.sort_complex(np.round(full_eigenvalues[np.abs(full_eigenvalues) > 1e-9], 8)),
                       np.sort_complex(np.round(factored, 8)))
    assert np.isclose(interpret.copying_score(ov), interpret.copying_score(ov.full()))


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
