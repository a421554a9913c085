"""tinyattn.interpret: recording leaves no hook behind and records what the model computes; ablating or patching a
head changes exactly that head's contribution (against a forward written out by hand); head scores give their known
values on hand-made patterns; rollout multiplies the right matrices in the right order."""
import contextlib

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import interpret, models, nn


def gpt(**changes):
    ta.manual_seed(0)
    return models.GPT(models.GPTConfig(**{**dict(vocab_size=11, block_size=16, n_layer=2, num_heads=4, d_model=16),
                                          **changes})).double().eval()


def ids(batch=2, length=9, seed=0):
    return ta.tensor(np.random.default_rng(seed).integers(0, 11, (batch, length)))


def hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


# -- recording --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["fast", "reference"])
def test_recorded_attention_and_outputs_are_what_the_model_computes(path):
    model, x = gpt(mlp="none"), ids()
    with ta.no_grad(), ta.reference() if path == "reference" else contextlib.nullcontext():
        logits, maps = model(x, return_attention=True)
        with interpret.record(model) as cache:
            again = model(x)
    assert np.array_equal(again.numpy(), logits.numpy())          # recording changed nothing the model computes
    assert list(cache.attention) == ["blocks.0.attn", "blocks.1.attn"]
    for name, expected in zip(cache.attention, maps):
        assert cache.attention[name].shape == (2, 4, 9, 9)
        assert np.array_equal(cache.attention[name].numpy(), expected.numpy())
    assert np.array_equal(cache[""].numpy(), logits.numpy()) and np.array_equal(cache["head"].numpy(), logits.numpy())
    block = model.blocks[1]
    assert np.allclose(cache["blocks.1"].numpy(), (cache["blocks.0"] + cache["blocks.1.attn"]).numpy())   # no MLP
    heads = cache.heads["blocks.1.attn"]
    assert heads.shape == (2, 9, 4, 4)                            # (B, T, H, head_dim)
    assert np.allclose(block.attn.out_proj(heads.reshape(2, 9, 16)).numpy(), cache["blocks.1.attn"].numpy())


def test_recording_leaves_no_hook_and_records_nothing_outside_the_block():
    model, x = gpt(mlp="none"), ids()
    before = hooks(model)
    with interpret.record(model) as cache:
        assert hooks(model) > before and all(b.attn.hook_pattern.hooked for b in model.blocks)
        model(x)
    assert hooks(model) == before and not any(b.attn.hook_pattern.hooked for b in model.blocks)
    recorded = cache.attention["blocks.0.attn"]
    model(ids(seed=1))
    assert cache.attention["blocks.0.attn"] is recorded
    assert set(cache) == {name for name, _ in model.named_modules()} - {"blocks"}      # a ModuleList is never called
    with pytest.raises(RuntimeError, match="boom"), interpret.record(model):
        raise RuntimeError("boom")
    assert hooks(model) == before and not model.blocks[0].attn.hook_pattern.hooked


def test_recording_keeps_the_models_own_pattern_hook_and_works_with_gradients():
    model, x = gpt(), ids()
    own = model.blocks[0].attn.hook_pattern.register_forward_hook(lambda module, args, pattern: None)
    with interpret.record(model, names=["blocks.0.attn", "blocks.1.attn"]) as cache:
        logits, loss = model(x, x)
    loss.backward()                                               # the graph is the model's; the records are detached
    assert list(model.blocks[0].attn.hook_pattern._forward_hooks.values()) == [own.hooks[own.key]]
    assert not model.blocks[1].attn.hook_pattern.hooked
    assert set(cache) == {"blocks.0.attn", "blocks.1.attn"} and cache["blocks.0.attn"].grad_fn is None
    assert set(cache.heads) == {"blocks.0.attn", "blocks.1.attn"}


def test_recording_names_what_is_missing():
    model = gpt()
    with pytest.raises(KeyError, match=r"no submodule 'blocks.2.attn'; the nearest names: 'blocks.1.attn'"):
        with interpret.record(model, names=["blocks.2.attn"]):
            pass
    assert hooks(model) == 0
    with interpret.record(model, names="blocks.0") as cache:                # one name, as it is
        model(ids())
    with pytest.raises(KeyError, match=r"nothing was recorded for 'blocks.0.mlp'; recorded: 'blocks.0'"):
        cache["blocks.0.mlp"]


class Watched(np.ndarray):
    """An array that notes, for every product (np.matmul, which `@` calls) taking it, whether BLAS was held to one
    thread then; the results of elementwise work and products on it are Watched too, so it follows the forward."""
    products = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from tinyattn.cpu import tuning
        if ufunc is np.matmul:
            Watched.products.append(tuning._depth > 0)
        plain = lambda xs: tuple(x.view(np.ndarray) if isinstance(x, Watched) else x for x in xs)
        if "out" in kwargs:
            kwargs["out"] = plain(kwargs["out"])
        result = getattr(ufunc, method)(*plain(inputs), **kwargs)
        return result.view(Watched) if isinstance(result, np.ndarray) and result.dtype.kind == "f" else result


def test_every_product_of_a_forward_that_keeps_attention_weights_runs_with_blas_held(monkeypatch):
    # OpenBLAS's threads wait on a busy core outside the hold (4-8x slower on 2 cores with one busy)
    from tinyattn.cpu import tuning
    einsums, real_einsum = [], np.einsum

    def einsum(*args, **kwargs):
        einsums.append(tuning._depth > 0)
        return real_einsum(*args, **kwargs)
    monkeypatch.setattr(np, "einsum", einsum)
    model, x = gpt(), ids()
    for p in model.parameters():
        p.array = p.array.view(Watched)
    Watched.products.clear()
    with ta.no_grad():
        model(x)
        with interpret.record(model):
            model(x)
        model(x, return_attention=True)
        model.blocks[0].attn(model.tok_emb(x), need_weights=True)
    assert len(Watched.products) >= 4 * 3 * 2 + 2 * 2 + 1           # the weights' products among them
    assert all(Watched.products) and all(einsums)


# -- interventions, against a 1-layer attention-only GPT written out by hand ---------------------------------------
def by_hand(model, tokens, change=None):
    """The logits of a 1-layer attention-only GPT in NumPy, and each head's output z (B, T, H, head_dim); change(z)
    returns the z that out_proj then reads (a head ablated or patched)."""
    p = {name: w.numpy() for name, w in model.named_parameters()}
    layer_norm = lambda x, w, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    tokens = tokens.numpy()
    b, t = tokens.shape
    h = model.config.num_heads
    x = p["tok_emb.weight"][tokens] + p["pos_emb.weight"][:t]
    q, k, v = np.split(layer_norm(x, p["blocks.0.ln1.weight"], p["blocks.0.ln1.bias"]) @ p["blocks.0.attn.qkv.weight"].T
                       + p["blocks.0.attn.qkv.bias"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, h, -1).transpose(0, 2, 1, 3) for a in (q, k, v))       # (B, H, T, head_dim)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    scores = np.where(np.tri(t, dtype=bool), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    z = (weights @ v).transpose(0, 2, 1, 3)                                              # (B, T, H, head_dim)
    read = z if change is None else change(z.copy())
    attended = read.reshape(b, t, -1) @ p["blocks.0.attn.out_proj.weight"].T + p["blocks.0.attn.out_proj.bias"]
    x = x + attended
    return layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["head.weight"].T, z


def one_layer():
    return gpt(n_layer=1, mlp="none")


def test_the_hand_written_forward_is_the_models():
    model, x = one_layer(), ids()
    assert np.allclose(by_hand(model, x)[0], model(x).numpy(), atol=1e-12)


def zeroed(*heads):
    def change(z):
        z[:, :, list(heads)] = 0.0
        return z
    return change


@pytest.mark.parametrize("heads", [[1], [0, 3]])
def test_zero_ablation_removes_exactly_those_heads_contributions(heads):
    model, x = one_layer(), ids()
    before = model(x).numpy()
    with interpret.ablate_heads(model, {"blocks.0.attn": heads}):
        ablated = model(x).numpy()
    expected, _ = by_hand(model, x, zeroed(*heads))
    assert np.allclose(ablated, expected, atol=1e-12) and not np.allclose(ablated, before, atol=1e-3)
    assert np.array_equal(model(x).numpy(), before) and hooks(model) == 0          # restored


def test_mean_ablation_puts_each_heads_mean_over_batch_and_positions_in_its_place():
    model, x = one_layer(), ids(batch=3)
    _, z = by_hand(model, x)

    def to_mean_of(source):
        def change(z):
            z[:, :, 2] = source[:, :, 2].mean(axis=(0, 1))
            return z
        return change
    with interpret.record(model) as same:
        model(x)
    with interpret.ablate_heads(model, {"blocks.0.attn": 2}, how="mean", mean_from=same):     # one head, bare
        ablated = model(x).numpy()
    assert np.allclose(ablated, by_hand(model, x, to_mean_of(z))[0], atol=1e-12)
    # a mean over the current input's positions would carry later tokens into earlier outputs of a causal model
    with pytest.raises(ValueError, match="GPT is causal: a mean over this input's positions .* mean_from=cache"):
        interpret.ablate_heads(model, {"blocks.0.attn": [2]}, how="mean")
    other = ids(batch=5, length=4, seed=3)                        # a mean from another run, of other shapes
    with interpret.record(model) as cache:
        model(other)
    with interpret.ablate_heads(model, {"blocks.0.attn": [2]}, how="mean", mean_from=cache):
        ablated = model(x).numpy()
    assert np.allclose(ablated, by_hand(model, x, to_mean_of(by_hand(model, other)[1]))[0], atol=1e-12)


def test_patching_a_head_from_a_recorded_run_reproduces_that_runs_head_output():
    model, clean, corrupt = one_layer(), ids(seed=1), ids(seed=2)
    with interpret.record(model) as source:
        model(clean)
    with interpret.patch_heads(model, {"blocks.0.attn": [3]}, source=source), interpret.record(model) as patched:
        logits = model(corrupt).numpy()
    z_clean, z_corrupt = source.heads["blocks.0.attn"].numpy(), by_hand(model, corrupt)[1]
    z_patched = patched.heads["blocks.0.attn"].numpy()                # what out_proj read
    assert np.array_equal(z_patched[:, :, 3], z_clean[:, :, 3])
    assert np.allclose(z_patched[:, :, :3], z_corrupt[:, :, :3], atol=1e-12)

    def clean_head_3(z):
        z[:, :, 3] = z_clean[:, :, 3]
        return z
    assert np.allclose(logits, by_hand(model, corrupt, clean_head_3)[0], atol=1e-12)
    assert hooks(model) == 0


def test_interventions_refuse_what_they_cannot_do_and_leave_no_hook():
    model = one_layer()
    with interpret.record(model) as source:
        model(ids(length=9))
    with pytest.raises(ValueError, match=r"source's heads of 'blocks.0.attn' are \(B, L, H, head_dim\) = "
                                         r"\(2, 9, 4, 4\), this run's \(2, 7, 4, 4\)"):
        with interpret.patch_heads(model, {"blocks.0.attn": [0]}, source=source):
            model(ids(length=7))
    with pytest.raises(KeyError, match="source holds no heads of 'blocks.0.attn'"):
        interpret.patch_heads(model, {"blocks.0.attn": [0]}, source=interpret.Recording())
    with pytest.raises(IndexError, match="'blocks.0.attn' has 4 heads \\(0 to 3\\), got head 4"):
        with interpret.ablate_heads(model, {"blocks.0.attn": [4]}):
            pass
    with pytest.raises(TypeError, match="'blocks.0.ln1' is a LayerNorm, which has no heads tools can change; they "
                                        "change the heads of tinyattn's nn.Attention and of PyTorch's "
                                        "nn.MultiheadAttention"):
        with interpret.ablate_heads(model, {"blocks.0.ln1": [0]}):
            pass
    with pytest.raises(ValueError, match="how must be 'zero' or 'mean'"):
        interpret.ablate_heads(model, {"blocks.0.attn": [0]}, how="resample")
    for head in (1.5, [1.5], True, "1"):                       # 1.5 must not quietly ablate head 1
        with pytest.raises(TypeError, match=f"a head index of 'blocks.0.attn' must be an integer, got "
                                            f"{(head[0] if isinstance(head, list) else head)!r}"):
            interpret.ablate_heads(model, {"blocks.0.attn": head})
    for context in (lambda: interpret.patch_heads(model, {"blocks.0.attn": [0]}, source={}),
                    lambda: interpret.ablate_heads(model, {"blocks.0.attn": [0]}, how="mean", mean_from={})):
        with pytest.raises(TypeError, match=r"(source|mean_from) must be a Recording \(with interpret.record\(model\) "
                                            r"as cache: model\(ids\)\), got dict"):
            context()
    assert hooks(model) == 0


class Ported(nn.Module):
    """Code ported from PyTorch: self-attention through nn.MultiheadAttention (PyTorch's name and signature)."""

    def __init__(self, batch_first):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        self.batch_first = batch_first

    def forward(self, x):
        x = x if self.batch_first else x.transpose(0, 1)
        out = self.attn(x, x, x, need_weights=False)[0]
        return out if self.batch_first else out.transpose(0, 1)


def multihead_by_hand(module, x, change=None):
    """PyTorch's documented MultiheadAttention on x (B, L, E): its (B, H, L, L) weights, heads z (B, L, H, hd) and
    output, z changed by change(z) before out_proj."""
    w, b = module.in_proj_weight.numpy(), module.in_proj_bias.numpy()
    q, k, v = np.split(x @ w.T + b, 3, axis=-1)
    q, k, v = (a.reshape(*a.shape[:2], 2, 4).transpose(0, 2, 1, 3) for a in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / 2.0
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    z = (weights @ v).transpose(0, 2, 1, 3)
    read = z if change is None else change(z.copy())
    out = read.reshape(*x.shape[:2], 8) @ module.out_proj.weight.numpy().T + module.out_proj.bias.numpy()
    return weights, z, out


@pytest.mark.parametrize("batch_first", [True, False])
def test_pytorchs_multihead_attention_is_recorded_ablated_and_patched(batch_first):
    ta.manual_seed(0)
    model = Ported(batch_first).double().eval()
    x, other = ta.randn(3, 5, 8, dtype=ta.float64), ta.randn(3, 5, 8, dtype=ta.float64)
    weights, z, out = multihead_by_hand(model.attn, x.numpy())
    with interpret.record(model) as cache:
        assert np.allclose(model(x).numpy(), out, atol=1e-12)
    assert not model.attn.hook_pattern.hooked
    assert np.allclose(cache.attention["attn"].numpy(), weights, atol=1e-12)       # (B, H, L, S)
    assert np.allclose(cache.heads["attn"].numpy(), z, atol=1e-12)                 # (B, L, H, head_dim)
    with interpret.ablate_heads(model, {"attn": 1}):
        assert np.allclose(model(x).numpy(), multihead_by_hand(model.attn, x.numpy(), zeroed(1))[2], atol=1e-12)

    def to_mean(z):                                                                 # not causal: this input's mean
        z[:, :, 0] = z[:, :, 0].mean(axis=(0, 1))
        return z
    with interpret.ablate_heads(model, {"attn": [0]}, how="mean"):
        assert np.allclose(model(x).numpy(), multihead_by_hand(model.attn, x.numpy(), to_mean)[2], atol=1e-12)
    z_other = multihead_by_hand(model.attn, other.numpy())[1]

    def from_other(z):
        z[:, :, 1] = z_other[:, :, 1]
        return z
    with interpret.record(model) as source:
        model(other)
    with interpret.patch_heads(model, {"attn": [1]}, source=source):
        assert np.allclose(model(x).numpy(), multihead_by_hand(model.attn, x.numpy(), from_other)[2], atol=1e-12)
    assert hooks(model) == 0


def test_a_shared_attention_module_is_recorded_once_and_left_as_it_was():
    # PyTorch's named_modules lists a module reachable under two names once (remove_duplicate=True); record must
    # leave its hook_pattern unhooked either way
    attention = nn.Attention(8, 2)
    model = nn.Sequential(attention, attention)
    assert [name for name, _ in model.named_modules()] == ["", "0", "0.qkv", "0.out_proj"]
    with interpret.record(model) as cache:
        model(ta.randn(1, 3, 8))
    assert not attention.hook_pattern.hooked and list(cache.attention) == ["0"]
    with interpret.record(model, names=["0", "1"]) as cache:                     # both names, asked for
        assert len(attention.hook_pattern._forward_hooks) == 2
        model(ta.randn(1, 3, 8))
    assert not attention.hook_pattern.hooked and set(cache.attention) == {"0", "1"}
    with pytest.warns(UserWarning, match=r"record sees the weights and heads of nn.Attention, "
                                         r"nn.MultiheadAttention only; '0' \(WindowAttention\): output recorded"):
        with interpret.record(nn.Sequential(nn.WindowAttention(8, 2, 2))) as cache:
            pass


# -- head scores on hand-made patterns --------------------------------------------------------------------------------
def pattern(t, targets):
    """A (T, T) causal pattern: query i puts all its weight on targets(i) (position 0 and any i without one: on
    itself)."""
    w = np.zeros((t, t))
    for i in range(t):
        w[i, targets(i) if targets(i) is not None else i] = 1.0
    return w


def test_previous_token_score_of_a_perfect_pattern_is_1_and_of_uniform_attention_its_mean_of_1_over_i():
    t = 8
    uniform = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    heads = np.stack([pattern(t, lambda i: i - 1 if i else None), uniform, np.eye(t)])          # (H, T, T)
    scores = interpret.previous_token_score([ta.tensor(heads[None].repeat(2, axis=0))])
    assert scores.shape == (1, 3)
    assert np.allclose(scores[0], [1.0, np.mean(1 / np.arange(2, t + 1)), 0.0], atol=1e-15)


def repeated(period, batch=2, seed=0):
    """Random sequences of period distinct tokens, repeated once: (B, 2 * period)."""
    rng = np.random.default_rng(seed)
    return np.tile(np.stack([rng.permutation(50)[:period] for _ in range(batch)]), 2)


def test_induction_and_duplicate_scores_of_perfect_patterns_are_1_and_tell_the_two_apart():
    period = 6
    tokens = repeated(period)
    t = 2 * period
    induction = pattern(t, lambda i: i - period + 1 if i >= period else None)     # the token after the first copy
    duplicate = pattern(t, lambda i: i - period if i >= period else None)         # the first copy itself
    previous = pattern(t, lambda i: i - 1 if i else None)
    layers = [np.stack([previous, duplicate])[None].repeat(2, axis=0),
              np.stack([induction, duplicate])[None].repeat(2, axis=0)]          # (B, H, T, T) each
    assert np.array_equal(interpret.induction_score(layers, tokens), [[0.0, 0.0], [1.0, 0.0]])
    assert np.array_equal(interpret.duplicate_token_score(layers, ta.tensor(tokens)), [[0.0, 1.0], [0.0, 1.0]])
    assert np.allclose(interpret.previous_token_score(layers), [[1.0, 0.0], [0.0, 0.0]], atol=1e-15)
    half = [(induction + duplicate)[None, None] / 2]                              # half on each target
    assert np.allclose(interpret.induction_score(half, tokens[:1]), 0.5, atol=1e-15)


def test_induction_score_counts_every_earlier_copy_and_only_queries_that_have_one():
    tokens = np.array([[4, 5, 4, 6, 4]])          # position 2 repeats 0 (target 1); 4 repeats 0 and 2 (targets 1, 3)
    w = np.zeros((1, 1, 5, 5))
    w[0, 0, 2, 1] = 1.0                           # all on its target
    w[0, 0, 4, [1, 3]] = 0.25                     # half on its targets
    w[0, 0, [0, 1, 3], 0] = 1.0                   # queries without an earlier copy: not counted
    assert np.isclose(interpret.induction_score([w], tokens)[0, 0], (1.0 + 0.5) / 2)


def test_head_scores_refuse_inputs_without_an_answer():
    with pytest.raises(ValueError, match="previous_token_score needs sequences of 2 tokens or more .*over 1"):
        interpret.previous_token_score([np.ones((1, 2, 1, 1))])
    with pytest.raises(ValueError, match="no query position has a target"):
        interpret.induction_score([np.ones((1, 1, 3, 3)) / 3], np.array([[1, 2, 3]]))
    with pytest.raises(ValueError, match=r"tokens give targets for \(B, T, T\) = \(1, 4, 4\), the weights are "
                                         r"\(B, T, T\) = \(1, 3, 3\)"):
        interpret.duplicate_token_score([np.ones((1, 1, 3, 3))], np.array([[1, 2, 1, 1]]))
    with pytest.raises(ValueError, match=r"one shape, got shapes \[\(1, 2, 3, 3\), \(1, 2, 4, 4\)\]"):
        interpret.previous_token_score([np.ones((1, 2, 3, 3)), np.ones((1, 2, 4, 4))])


# -- attention rollout -------------------------------------------------------------------------------------------
def test_rollout_of_two_layers_by_hand():
    """Layer 1: token 2 reads token 1 (head 0) or itself (head 1); layer 2: token 1 reads token 0 (head 0) or itself.
    With the residual (identity added, rows renormalised) and the top layer on the left, token 2 ends up with nothing
    of token 0: token 1 read token 0 only after token 2 had read token 1."""
    eye = np.eye(3)
    layer1 = np.stack([eye, eye])
    layer1[0, 2] = [0, 1, 0]
    layer2 = np.stack([eye, eye])
    layer2[0, 1] = [1, 0, 0]
    # per layer: (heads' mean + I) / 2, i.e. row 2 of layer 1 = (0, 1/4, 3/4), row 1 of layer 2 = (1/4, 3/4, 0)
    expected = np.array([[1, 0, 0], [0.25, 0.75, 0], [0, 0.25, 0.75]])       # layer 2's matrix @ layer 1's
    rollout = interpret.attention_rollout([ta.tensor(np.stack([layer1, np.stack([eye, eye])])),
                                           np.stack([layer2, np.stack([eye, eye])])])
    assert rollout.shape == (2, 3, 3)
    assert np.allclose(rollout[0], expected, atol=1e-15) and np.allclose(rollout[1], eye, atol=1e-15)
    with pytest.raises(ValueError, match=r"got shapes \[\(3, 3\)\]"):
        interpret.attention_rollout([eye])
