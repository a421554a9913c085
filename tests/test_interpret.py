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
        assert hooks(model) > before and all(b.attn.keep_weights for b in model.blocks)
        model(x)
    assert hooks(model) == before and not any(b.attn.keep_weights for b in model.blocks)
    recorded = cache.attention["blocks.0.attn"]
    model(ids(seed=1))
    assert cache.attention["blocks.0.attn"] is recorded
    assert set(cache) == {name for name, _ in model.named_modules()} - {"blocks"}      # a ModuleList is never called
    with pytest.raises(RuntimeError, match="boom"), interpret.record(model):
        raise RuntimeError("boom")
    assert hooks(model) == before and not model.blocks[0].attn.keep_weights


def test_recording_keeps_the_models_own_keep_weights_and_works_with_gradients():
    model, x = gpt(), ids()
    model.blocks[0].attn.keep_weights = True
    with interpret.record(model, names=["blocks.0.attn", "blocks.1.attn"]) as cache:
        logits, loss = model(x, x)
    loss.backward()                                               # the graph is the model's; the records are detached
    assert model.blocks[0].attn.keep_weights and not model.blocks[1].attn.keep_weights
    assert set(cache) == {"blocks.0.attn", "blocks.1.attn"} and cache["blocks.0.attn"].grad_fn is None
    assert set(cache.heads) == {"blocks.0.attn", "blocks.1.attn"}


def test_recording_names_what_is_missing():
    model = gpt()
    with pytest.raises(KeyError, match=r"no submodule 'blocks.2.attn'; the nearest names: 'blocks.1.attn'"):
        with interpret.record(model, names=["blocks.2.attn"]):
            pass
    assert hooks(model) == 0
    with interpret.record(model, names=["blocks.0"]) as cache:
        model(ids())
    with pytest.raises(KeyError, match=r"nothing was recorded for 'blocks.0.mlp'; recorded: 'blocks.0'"):
        cache["blocks.0.mlp"]
