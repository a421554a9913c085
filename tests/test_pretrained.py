"""Real models in and out: GPT-2 and ViT folders in Hugging Face's published layouts, written here from known weights
(no download, no PyTorch), read by from_pretrained; save_pretrained's files; every refusal.

The layouts, as transformers and the hub write them: GPT-2's linear layers are Conv1D with weights stored (in, out);
c_attn holds q, k and v side by side; the hub's own gpt2 files have no "transformer." prefix and carry each layer's
causal mask as h.N.attn.bias / h.N.attn.masked_bias; save_pretrained writes the prefix and omits lm_head.weight when
it is tied to wte. ViT's query, key and value are separate Linears; its patch embedding is a Conv2d (D, C, p, p)."""
import builtins
import json
import math
import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

import tinyattn as ta
from tinyattn import hub, models, preprocessing

from conftest import host

D, HEADS, LAYERS, VOCAB, POSITIONS = 8, 2, 2, 11, 12


def gpt2_arrays(rng, n_layer=LAYERS, d=D, vocab=VOCAB, positions=POSITIONS):
    """Random GPT-2 weights in the published layout (no prefix)."""
    def r(*shape):
        return rng.normal(0, 0.3, shape)
    arrays = {"wte.weight": r(vocab, d), "wpe.weight": r(positions, d), "ln_f.weight": 1 + r(d), "ln_f.bias": r(d)}
    for i in range(n_layer):
        arrays.update({f"h.{i}.ln_1.weight": 1 + r(d), f"h.{i}.ln_1.bias": r(d),
                       f"h.{i}.attn.c_attn.weight": r(d, 3 * d), f"h.{i}.attn.c_attn.bias": r(3 * d),
                       f"h.{i}.attn.c_proj.weight": r(d, d), f"h.{i}.attn.c_proj.bias": r(d),
                       f"h.{i}.ln_2.weight": 1 + r(d), f"h.{i}.ln_2.bias": r(d),
                       f"h.{i}.mlp.c_fc.weight": r(d, 4 * d), f"h.{i}.mlp.c_fc.bias": r(4 * d),
                       f"h.{i}.mlp.c_proj.weight": r(4 * d, d), f"h.{i}.mlp.c_proj.bias": r(d)})
    return arrays


def gpt2_config(**changes):
    config = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": POSITIONS, "n_embd": D, "n_layer": LAYERS,
              "n_head": HEADS, "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
              "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "scale_attn_weights": True,
              "scale_attn_by_inverse_layer_idx": False, "tie_word_embeddings": True}
    config.update(changes)
    return config


def write(folder, config, arrays, dtype="float32"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: np.ascontiguousarray(v, dtype=dtype) for k, v in arrays.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    return folder


def gpt2_by_hand(arrays, ids, n_layer, heads, eps=1e-5):
    """GPT-2's forward written from its equations on the file's arrays (float64): Conv1D is x W + b."""
    def layer_norm(x, w, b):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w + b

    def gelu_new(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    a = lambda k: arrays[k].astype(np.float64)
    t = len(ids)
    x = a("wte.weight")[ids] + a("wpe.weight")[:t]
    for i in range(n_layer):
        h = layer_norm(x, a(f"h.{i}.ln_1.weight"), a(f"h.{i}.ln_1.bias"))
        q, k, v = np.split(h @ a(f"h.{i}.attn.c_attn.weight") + a(f"h.{i}.attn.c_attn.bias"), 3, axis=-1)
        dh = q.shape[-1] // heads
        out = []
        for head in range(heads):
            s = slice(head * dh, (head + 1) * dh)
            scores = q[:, s] @ k[:, s].T / math.sqrt(dh) + np.triu(np.full((t, t), -np.inf), 1)
            w = np.exp(scores - scores.max(-1, keepdims=True))
            out.append(w / w.sum(-1, keepdims=True) @ v[:, s])
        x = x + np.concatenate(out, -1) @ a(f"h.{i}.attn.c_proj.weight") + a(f"h.{i}.attn.c_proj.bias")
        h = layer_norm(x, a(f"h.{i}.ln_2.weight"), a(f"h.{i}.ln_2.bias"))
        x = x + gelu_new(h @ a(f"h.{i}.mlp.c_fc.weight") + a(f"h.{i}.mlp.c_fc.bias")) @ a(
            f"h.{i}.mlp.c_proj.weight") + a(f"h.{i}.mlp.c_proj.bias")
    return layer_norm(x, a("ln_f.weight"), a("ln_f.bias")) @ a("wte.weight").T


def test_one_layer_gpt2_file_computes_gpt2s_equations(tmp_path):
    arrays = gpt2_arrays(np.random.default_rng(0), n_layer=1)
    folder = write(tmp_path / "gpt2", gpt2_config(n_layer=1), arrays, dtype="float64")
    model = models.GPT.from_pretrained(folder)
    assert not model.training and model.tok_emb.weight.dtype == ta.float64     # the file's dtype
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    np.testing.assert_allclose(host(model(ta.tensor(ids[None])))[0], gpt2_by_hand(arrays, ids, 1, HEADS),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("spelling", ["hub", "transformers", "sharded"])
def test_both_key_spellings_and_shards_load_the_same_model(tmp_path, spelling):
    arrays = gpt2_arrays(np.random.default_rng(1))
    if spelling == "hub":                       # the hub's gpt2: no prefix, the causal masks as buffers
        for i in range(LAYERS):
            arrays[f"h.{i}.attn.bias"] = np.tril(np.ones((POSITIONS, POSITIONS)))[None, None]
            arrays[f"h.{i}.attn.masked_bias"] = np.array(-1e4)
        folder = write(tmp_path / "m", gpt2_config(), arrays)
    else:
        prefixed = {"transformer." + k: v for k, v in arrays.items()}
        folder = write(tmp_path / "m", gpt2_config(), prefixed)
        if spelling == "sharded":
            (folder / "model.safetensors").unlink()
            keys = sorted(prefixed)
            shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
            for shard, names in shards.items():
                save_file({k: prefixed[k].astype(np.float32) for k in names}, str(folder / shard))
            weight_map = {k: shard for shard, names in shards.items() for k in names}
            (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    model = models.GPT.from_pretrained(folder)
    assert model.tok_emb.weight.dtype == ta.float32
    assert model.head.weight is model.tok_emb.weight
    np.testing.assert_array_equal(host(model.blocks[1].attn.qkv.weight), arrays["h.1.attn.c_attn.weight"].T
                                  .astype(np.float32))
    ids = np.array([0, 10, 3, 3, 7])
    logits = host(model.double()(ta.tensor(ids[None])))[0]
    np.testing.assert_allclose(logits, gpt2_by_hand({k: v.astype(np.float32) for k, v in arrays.items()}, ids,
                                                    LAYERS, HEADS), rtol=1e-10, atol=1e-12)


def test_config_decides_what_it_says(tmp_path):
    arrays = gpt2_arrays(np.random.default_rng(2))
    arrays = {k: (v[:, :4 * 5] if "c_fc.weight" in k else v[:4 * 5] if "c_fc.bias" in k else
                  v[:4 * 5] if "mlp.c_proj.weight" in k else v) for k, v in arrays.items()}
    arrays["lm_head.weight"] = np.random.default_rng(3).normal(size=(VOCAB, D))
    folder = write(tmp_path / "m", gpt2_config(n_inner=20, activation_function="relu", layer_norm_epsilon=1e-3,
                                               tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0,
                                               attn_pdrop=0.0), arrays)
    model = models.GPT.from_pretrained(folder)
    c = model.config
    assert (c.mlp_hidden, c.activation, c.norm_eps, c.tie_weights, c.dropout) == (20, "relu", 1e-3, False, 0.0)
    assert (c.block_size, c.n_layer, c.num_heads, c.d_model, c.vocab_size) == (POSITIONS, LAYERS, HEADS, D, VOCAB)
    assert model.head.weight is not model.tok_emb.weight
    np.testing.assert_array_equal(host(model.head.weight), arrays["lm_head.weight"].astype(np.float32))


def test_older_and_training_settings_load_as_transformers_loads_them(tmp_path):
    arrays = gpt2_arrays(np.random.default_rng(2))
    # three different dropouts (transformers loads them; they matter in training only), and n_ctx without
    # n_positions, as older files give the context
    config = gpt2_config(resid_pdrop=0.1, embd_pdrop=0.2, attn_pdrop=0.3)
    config["n_ctx"] = config.pop("n_positions")
    folder = write(tmp_path / "m", config, arrays)
    model = models.GPT.from_pretrained(folder)
    assert (model.config.dropout, model.config.block_size, model.training) == (0.1, POSITIONS, False)
    assert models.GPT.from_pretrained(folder, dropout=0.25).config.dropout == 0.25      # nanoGPT's override_args
    with pytest.raises(TypeError, match="overrides dropout and impl only; n_layer come from config.json"):
        models.GPT.from_pretrained(folder, n_layer=1)
    del config["n_ctx"]
    write(folder, config, arrays)
    with pytest.raises(hub.PretrainedError, match="has neither 'n_positions' nor 'n_ctx'"):
        models.GPT.from_pretrained(folder)


def test_a_tensor_of_the_wrong_shape_is_named_by_its_key_in_the_file(tmp_path):
    arrays = gpt2_arrays(np.random.default_rng(2))
    arrays["h.1.mlp.c_fc.weight"] = arrays["h.1.mlp.c_fc.weight"][:, :-1]            # (in, out) = (8, 31)
    folder = write(tmp_path / "m", gpt2_config(), {"transformer." + k: v for k, v in arrays.items()})
    with pytest.raises(hub.PretrainedError, match=r"m holds tensors of another shape than its config.json "
                                                  r"describes: transformer.h.1.mlp.c_fc.weight is \(8, 31\), the "
                                                  r"model needs \(8, 32\)$"):
        models.GPT.from_pretrained(folder)


def test_a_stored_lm_head_loads_as_transformers_5_loads_it(tmp_path):
    # transformers 5 with tie_word_embeddings: both stored and equal -> tied; both stored and different -> kept
    # apart, with a warning
    arrays = gpt2_arrays(np.random.default_rng(2))
    folder = write(tmp_path / "same", gpt2_config(), {**arrays, "lm_head.weight": arrays["wte.weight"]})
    model = models.GPT.from_pretrained(folder)
    assert model.head.weight is model.tok_emb.weight and model.config.tie_weights
    head = np.random.default_rng(3).normal(size=(VOCAB, D))
    folder = write(tmp_path / "differ", gpt2_config(), {**arrays, "lm_head.weight": head})
    with pytest.warns(UserWarning, match="lm_head.weight differs from wte.weight; loading both, untied"):
        model = models.GPT.from_pretrained(folder)
    assert model.head.weight is not model.tok_emb.weight and not model.config.tie_weights
    np.testing.assert_array_equal(host(model.head.weight), head.astype(np.float32))
    np.testing.assert_array_equal(host(model.tok_emb.weight), arrays["wte.weight"].astype(np.float32))


def test_save_pretrained_round_trips_and_writes_gpt2s_layout(tmp_path):
    ta.manual_seed(0)
    config = models.GPTConfig(vocab_size=VOCAB, block_size=POSITIONS, n_layer=LAYERS, num_heads=HEADS, d_model=D,
                              activation="gelu_tanh", tie_weights=True)
    model = models.GPT(config).eval()
    model.save_pretrained(tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == "gpt2" and written["activation_function"] == "gelu_new"
    assert (written["n_embd"], written["n_layer"], written["n_head"], written["n_positions"]) == (D, LAYERS, HEADS,
                                                                                                 POSITIONS)
    data = (tmp_path / "out" / "model.safetensors").read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    assert header["__metadata__"] == {"format": "pt"}
    assert "lm_head.weight" not in header                          # tied: transformers ties it back to wte
    assert header["transformer.h.0.mlp.c_fc.weight"]["shape"] == [D, 4 * D]          # Conv1D: (in, out)
    again = models.GPT.from_pretrained(tmp_path / "out")
    ids = ta.randint(0, VOCAB, (2, 9))
    np.testing.assert_array_equal(host(again(ids)), host(model(ids)))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]


def small_gpt(seed, **changes):
    ta.manual_seed(seed)
    return models.GPT(models.GPTConfig(**{**dict(vocab_size=VOCAB, block_size=POSITIONS, n_layer=LAYERS,
                                                 num_heads=HEADS, d_model=D, activation="gelu_tanh",
                                                 tie_weights=True), **changes})).eval()


def folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("fault", ["fsync", "replace"])
def test_a_failing_save_pretrained_leaves_the_whole_old_save_or_the_whole_new_one(tmp_path, monkeypatch, fault):
    # the write of each file fails in turn (a full disk at fsync, a failing rename); other files always survive
    old, new = small_gpt(0), small_gpt(1, vocab_size=VOCAB + 3, n_layer=1)
    old.save_pretrained(tmp_path / "old")
    new.save_pretrained(tmp_path / "new")
    old_files, new_files = folder_bytes(tmp_path / "old"), folder_bytes(tmp_path / "new")
    real, failures = getattr(os, fault), 0
    for n in range(1, 20):
        folder = tmp_path / f"try{n}"
        old.save_pretrained(folder)
        (folder / "tokenizer.json").write_text('{"model": "placed by hand"}')
        calls = []

        def failing(*args, real=real, n=n, calls=calls):
            calls.append(args)
            if len(calls) == n:
                raise OSError(28, "No space left on device")
            return real(*args)
        monkeypatch.setattr(os, fault, failing)
        try:
            new.save_pretrained(folder)
        except OSError:
            failures += 1
            expected = old_files
        else:
            expected = new_files
        finally:
            monkeypatch.setattr(os, fault, real)
        files = folder_bytes(folder)
        assert files.pop("tokenizer.json") == b'{"model": "placed by hand"}'
        assert files == expected                                   # no mix, no temporaries, nothing set aside
        if expected is new_files:
            break
    assert failures >= 2                                           # each of the two files failed once at least


def test_save_pretrained_writes_numpy_settings_and_replaces_an_earlier_sharded_save(tmp_path):
    ids = np.array([[3, 1, 4, 1, 5]])
    vocab = ids.max() + 10                                          # a NumPy integer, as training code makes them
    model = small_gpt(0, vocab_size=vocab)
    folder = tmp_path / "out"
    folder.mkdir()
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        save_file({"x": np.zeros(2, np.float32)}, str(folder / name))          # an earlier save's shards
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-00001-of-00002"
                                                                                        ".safetensors"}}))
    (folder / "README.md").write_text("my model")
    (folder / "preprocessor_config.json").write_text("{}")
    model.save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                        "preprocessor_config.json"]
    assert '"vocab_size": 15' in (folder / "config.json").read_text()
    np.testing.assert_array_equal(host(models.GPT.from_pretrained(folder)(ids)), host(model(ids)))
    with pytest.raises(TypeError, match="the setting block_size=.* is a object, which config.json cannot hold"):
        hub.write_folder(tmp_path / "never", {"block_size": object()}, {"w": np.zeros(1)})
    assert not (tmp_path / "never").exists()                       # refused before anything was written


@pytest.mark.parametrize("setting, message", [
    ({"position": "rope"}, "position='rope'"), ({"norm": "rms"}, "norm='rms'"), ({"mlp": "swiglu"}, "mlp='swiglu'"),
    ({"mlp": "moe"}, "mlp='moe'"), ({"num_kv_heads": 1}, "num_kv_heads=1"), ({"bias": False}, "bias=False"),
    ({"prenorm": False}, "prenorm=False")])
def test_save_pretrained_refuses_what_gpt2_cannot_express(tmp_path, setting, message):
    model = models.GPT(models.GPTConfig(vocab_size=VOCAB, block_size=8, n_layer=1, num_heads=2, d_model=D, **setting))
    with pytest.raises(ValueError, match=f"GPT-2 cannot express GPTConfig\\({message}\\)"):
        model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, message", [
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
    ({"scale_attn_weights": False}, "scale_attn_weights=False"),
    ({"add_cross_attention": True}, "add_cross_attention=True"),
    ({"activation_function": "swish"}, "activation_function='swish'"),
    ({"model_type": "llama"}, "is a 'llama' model"),
    ({"n_head": None}, None)])
def test_settings_gptconfig_cannot_express_are_refused_naming_the_key(tmp_path, change, message):
    config = gpt2_config(**change)
    if message is None:                                   # a required setting that is absent
        del config["n_head"]
        message = "has no 'n_head'"
    folder = write(tmp_path / "m", config, gpt2_arrays(np.random.default_rng(0)))
    with pytest.raises(hub.PretrainedError, match=message):
        models.GPT.from_pretrained(folder)


def test_missing_unknown_and_absent_files_are_named(tmp_path):
    arrays = gpt2_arrays(np.random.default_rng(0))
    del arrays["h.1.ln_2.bias"]
    arrays["h.0.attn.q_norm.weight"] = np.ones(D)
    folder = write(tmp_path / "m", gpt2_config(), arrays)
    with pytest.raises(hub.PretrainedError, match=r"no place for: \['h.0.attn.q_norm.weight'\].*"
                                                  r"missing .*\['blocks.1.ln2.bias'\]"):
        models.GPT.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02")
    with pytest.raises(hub.PretrainedError, match="pytorch_model.bin but no model.safetensors.*keeps the model's head"
                                                  ".*AutoModelForCausalLM.*AutoModelForImageClassification.*"
                                                  "save_pretrained"):
        models.GPT.from_pretrained(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(hub.PretrainedError, match="config.json is not valid JSON"):
        models.GPT.from_pretrained(folder)
    (folder / "config.json").unlink()
    with pytest.raises(hub.PretrainedError, match="holds no config.json"):
        models.GPT.from_pretrained(folder)
    with pytest.raises(hub.PretrainedError, match="is not a folder"):
        models.GPT.from_pretrained(tmp_path / "nowhere")


@pytest.mark.parametrize("weight_map", [["a"], None, {"wte.weight": 3}], ids=["list", "null", "shard-not-a-name"])
def test_a_damaged_index_is_refused_naming_it(tmp_path, weight_map):
    folder = write(tmp_path / "m", gpt2_config(), gpt2_arrays(np.random.default_rng(0)))
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(hub.PretrainedError, match="model.safetensors.index.json is damaged: its weight_map"):
        models.GPT.from_pretrained(folder)


def test_deep_json_and_invalid_hub_names_are_refused_saying_so(tmp_path):
    folder = write(tmp_path / "m", gpt2_config(), gpt2_arrays(np.random.default_rng(0)))
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(hub.PretrainedError, match="config.json is not valid JSON .nested too deeply"):
        models.GPT.from_pretrained(folder)
    for name in ("gpt2/..", "-gpt2", "a/b--c", "gpt2 small"):
        with pytest.raises(hub.PretrainedError, match="is neither a folder nor a valid Hugging Face hub name"):
            models.GPT.from_pretrained(name)


def test_bfloat16_files_load_as_float32_with_one_warning(tmp_path):
    # many published checkpoints are bfloat16: its 16 bits are the high half of a float32, so widening is exact
    arrays = {k: v.astype(np.float32) for k, v in gpt2_arrays(np.random.default_rng(0)).items()}
    high_halves = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in arrays.items()}
    folder = tmp_path / "bf16"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(gpt2_config()))
    header, body = {"__metadata__": {"format": "pt"}}, b""
    for key, bits in high_halves.items():
        header[key] = {"dtype": "BF16", "shape": list(bits.shape), "data_offsets": [len(body), len(body) + bits.nbytes]}
        body += bits.tobytes()
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + body)
    with pytest.warns(UserWarning, match="bfloat16 tensors .* read as float32") as seen:
        model = models.GPT.from_pretrained(folder)
    assert len(seen) == 1 and model.tok_emb.weight.dtype == ta.float32
    expected = (high_halves["wte.weight"].astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(host(model.tok_emb.weight), expected)


def test_a_hub_name_without_the_package_or_offline_says_what_to_do(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name == "huggingface_hub":
            raise ImportError("No module named 'huggingface_hub'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_hub)
    with pytest.raises(hub.PretrainedError, match=r"'gpt2' is not a local folder.*huggingface_hub package.*"
                                                  r"pip install -e \"\.\[hub\]\".*folder by hand"):
        models.GPT.from_pretrained("gpt2")
    monkeypatch.undo()
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(hub.PretrainedError, match=r"could not fetch 'openai-community/gpt2'.*huggingface_hub.*"
                                                  r"folder by hand"):
        models.GPT.from_pretrained("openai-community/gpt2")


# -- ViT -------------------------------------------------------------------------------------------------------------
def vit_files(tmp_path, model, id2label):
    """model's weights written as a ViTForImageClassification folder, from the published layout."""
    c, state = model.config, {k: host(v) for k, v in model.state_dict().items()}
    d, p = c.d_model, c.patch_size
    arrays = {"vit.embeddings.cls_token": state["cls_token"], "vit.embeddings.position_embeddings": state["pos_embed"],
              "vit.embeddings.patch_embeddings.projection.weight": state["patch_embed.proj.weight"].reshape(
                  d, c.in_chans, p, p),
              "vit.embeddings.patch_embeddings.projection.bias": state["patch_embed.proj.bias"],
              "vit.layernorm.weight": state["norm.weight"], "vit.layernorm.bias": state["norm.bias"],
              "classifier.weight": state["head.weight"], "classifier.bias": state["head.bias"]}
    for i in range(c.depth):
        ours, theirs = f"blocks.{i}.", f"vit.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = np.split(state[ours + f"attn.qkv.{kind}"], 3)
            arrays.update({theirs + f"attention.attention.query.{kind}": q,
                           theirs + f"attention.attention.key.{kind}": k,
                           theirs + f"attention.attention.value.{kind}": v,
                           theirs + f"attention.output.dense.{kind}": state[ours + f"attn.out_proj.{kind}"],
                           theirs + f"layernorm_before.{kind}": state[ours + f"norm1.{kind}"],
                           theirs + f"layernorm_after.{kind}": state[ours + f"norm2.{kind}"],
                           theirs + f"intermediate.dense.{kind}": state[ours + f"mlp.fc1.{kind}"],
                           theirs + f"output.dense.{kind}": state[ours + f"mlp.fc2.{kind}"]})
    config = {"model_type": "vit", "image_size": c.image_size, "patch_size": p, "num_channels": c.in_chans,
              "hidden_size": d, "num_hidden_layers": c.depth, "num_attention_heads": c.num_heads,
              "intermediate_size": c.mlp_ratio * d, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "qkv_bias": True,
              "id2label": {str(i): name for i, name in id2label.items()}}
    folder = write(tmp_path / "vit", config, arrays)
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"do_resize": True, "size": {"height": c.image_size, "width": c.image_size}, "resample": 2,
         "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.4, 0.3],
         "image_std": [0.5, 0.25, 0.2]}))
    return folder


def test_vit_folder_loads_its_settings_and_weights(tmp_path):
    ta.manual_seed(0)
    model = models.ViT(models.ViTConfig(image_size=16, patch_size=4, in_chans=3, num_classes=3, d_model=16, depth=2,
                                        num_heads=2, norm_eps=1e-12))
    for p in model.parameters():                              # LayerNorms and biases away from 1 and 0
        p.array += ta.tensor(0.1 * np.random.default_rng(0).normal(size=p.shape).astype(np.float32),
                             device=p.device).array
    folder = vit_files(tmp_path, model, {0: "cat", 1: "dog", 2: "fish"})
    loaded = models.ViT.from_pretrained(folder)
    assert loaded.config.id2label == {0: "cat", 1: "dog", 2: "fish"} and loaded.config.norm_eps == 1e-12
    assert loaded.blocks[0].norm1.eps == 1e-12 and not loaded.training
    images = ta.randn(2, 3, 16, 16)
    np.testing.assert_array_equal(host(loaded(images)), host(model.eval()(images)))
    config = json.loads((folder / "config.json").read_text())
    for key, value, message in [("hidden_act", "relu", "hidden_act='relu'"), ("qkv_bias", False, "qkv_bias=false"),
                                ("intermediate_size", 40, "not a multiple of hidden_size=16")]:
        (folder / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(hub.PretrainedError, match=message):
            models.ViT.from_pretrained(folder)


def test_image_processor_resizes_rescales_and_normalises_as_configured(tmp_path):
    ta.manual_seed(0)
    model = models.ViT(models.ViTConfig(image_size=16, patch_size=4, in_chans=3, num_classes=2, d_model=8, depth=1,
                                        num_heads=2))
    processor = preprocessing.ImageProcessor.from_pretrained(vit_files(tmp_path, model, {0: "a", 1: "b"}))
    image = np.zeros((40, 30, 3), np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = 255, 0, 51       # a flat colour survives any resampling
    pixels = processor(image)
    assert pixels.shape == (1, 3, 16, 16) and pixels.dtype == np.float32
    np.testing.assert_allclose(pixels[0, :, 5, 7], [(1 - 0.5) / 0.5, (0 - 0.4) / 0.25, (0.2 - 0.3) / 0.2],
                               rtol=1e-6)
    with pytest.raises(ValueError, match=r"one RGB image of shape \(height, width, 3\), got \(40, 30\)"):
        processor(image[..., 0])
    settings_file = tmp_path / "vit" / "preprocessor_config.json"
    settings = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps({**settings, "size": 8}))           # the older files' one number
    assert preprocessing.ImageProcessor.from_pretrained(tmp_path / "vit")(image).shape == (1, 3, 8, 8)
    settings_file.write_text(json.dumps({**settings, "size": {"shortest_edge": 8}}))
    with pytest.raises(hub.PretrainedError, match="shortest_edge"):
        preprocessing.ImageProcessor.from_pretrained(tmp_path / "vit")


def test_image_processor_crops_the_centre_as_transformers_does_and_refuses_what_it_does_not_apply(tmp_path):
    # transformers: resize, then centre crop with top = (H - h) // 2 and left = (W - w) // 2 (an odd margin's
    # extra pixel at the bottom and right); a smaller image is padded with zeros first, the odd pixel at the end
    folder = tmp_path / "deit"
    folder.mkdir()
    settings = {"do_resize": True, "size": {"height": 40, "width": 40}, "resample": 3, "do_center_crop": True,
                "crop_size": {"height": 32, "width": 32}, "do_rescale": True, "rescale_factor": 1 / 255,
                "do_normalize": False, "do_pad": False, "image_processor_type": "DeiTImageProcessor"}
    (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    image = np.random.default_rng(0).integers(0, 256, (50, 60, 3), dtype=np.uint8)
    assert preprocessing.ImageProcessor.from_pretrained(folder)(image).shape == (1, 3, 32, 32)
    (folder / "preprocessor_config.json").write_text(json.dumps({**settings, "do_resize": False,
                                                                 "crop_size": {"height": 3, "width": 3}}))
    ramp = np.arange(6 * 8, dtype=np.uint8).reshape(6, 8, 1).repeat(3, axis=2)      # pixel value = 8 * y + x
    cropped = preprocessing.ImageProcessor.from_pretrained(folder)(ramp)[0, 0] * 255
    np.testing.assert_allclose(cropped, [[8 * y + x for x in (2, 3, 4)] for y in (1, 2, 3)], atol=1e-4)
    (folder / "preprocessor_config.json").write_text(json.dumps({**settings, "do_resize": False,
                                                                 "crop_size": {"height": 5, "width": 4}}))
    small = np.full((2, 1, 3), 255, np.uint8)
    padded = preprocessing.ImageProcessor.from_pretrained(folder)(small)[0, 0]
    assert padded.shape == (5, 4)
    np.testing.assert_array_equal(np.argwhere(padded == 1), [[1, 1], [2, 1]])      # pads (1, 2) rows, (1, 2) cols
    for key, value in [("crop_pct", 0.875), ("do_pad", True), ("size_divisor", 32)]:
        (folder / "preprocessor_config.json").write_text(json.dumps({**settings, key: value}))
        with pytest.raises(hub.PretrainedError, match=f"sets {key}, which ImageProcessor does not apply"):
            preprocessing.ImageProcessor.from_pretrained(folder)


def byte_level_bpe(text):
    """A byte-level BPE as GPT-2's (its pieces mark a leading space with 'Ġ'), trained on text."""
    tokenizers = pytest.importorskip("tokenizers")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    bpe.train_from_iterator([text] * 20, tokenizers.trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    return bpe


def test_tokenizer_reads_tokenizer_json(tmp_path):
    bpe = byte_level_bpe("the cat sat on the mat")
    bpe.save(str(tmp_path / "tokenizer.json"))
    tokenizer = preprocessing.Tokenizer.from_pretrained(tmp_path)
    ids = tokenizer.encode("the cat sat")
    assert tokenizer.decode(ids) == "the cat sat" and tokenizer.decode(ta.tensor(ids)) == "the cat sat"
    assert tokenizer.tokens("the cat") == ["the", "Ġcat"] and len(ids) == 3
    assert tokenizer.vocab_size == bpe.get_vocab_size()


def test_decode_keeps_special_tokens_and_batch_decode_takes_generates_output(tmp_path):
    # transformers: decode(..., skip_special_tokens=False) by default; batch_decode decodes each row
    bpe = byte_level_bpe("the cat sat on the mat")
    bpe.add_special_tokens(["<|endoftext|>"])
    bpe.save(str(tmp_path / "tokenizer.json"))
    tokenizer = preprocessing.Tokenizer.from_pretrained(tmp_path)
    ids = tokenizer.encode("the cat<|endoftext|>the mat")
    assert tokenizer.decode(ids) == "the cat<|endoftext|>the mat"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the catthe mat"
    rows = ta.tensor([tokenizer.encode("the cat"), tokenizer.encode("the mat")])          # (2, T), as generate's
    assert tokenizer.batch_decode(rows) == ["the cat", "the mat"]
    assert tokenizer.decode(rows[:1]) == "the cat"                                         # (1, T): its one row
    with pytest.raises(ValueError, match="decode takes one sequence, got 2; batch_decode"):
        tokenizer.decode(rows)


def test_a_missing_or_foreign_tokenizer_json_says_what_it_is_and_what_to_do(tmp_path):
    pytest.importorskip("tokenizers")
    with pytest.raises(hub.PretrainedError, match="holds no tokenizer.json.*a prompt needs it.*huggingface.co/gpt2"):
        preprocessing.Tokenizer.from_pretrained(tmp_path)
    for content in ('{"a": 1}', "[]", '{"version": "1.0"}'):
        (tmp_path / "tokenizer.json").write_text(content)
        with pytest.raises(hub.PretrainedError, match="tokenizer.json is not a tokenizer the tokenizers package "
                                                      "reads"):
            preprocessing.Tokenizer.from_pretrained(tmp_path)


# -- the lessons meet the real models (here: small ones in the same layouts) ---------------------------------------
def run_lesson(name, weights, tmp_path):
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "TINYATTN_PLOTS": str(tmp_path / "plots"), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, str(next((root / "lessons").glob(f"{name}_*.py"))), "--quick",
                           "--weights", str(weights)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


def result_of(completed):
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.rstrip().splitlines()[-1][len("RESULT "):])


def test_lesson_06_meets_a_gpt2_folder_and_refuses_a_missing_one_in_one_line(tmp_path):
    bpe = byte_level_bpe("The cat sat on the mat because the cat was tired.")
    folder = tmp_path / "gpt2"
    models.GPT(models.GPTConfig(vocab_size=bpe.get_vocab_size(), block_size=64, n_layer=2, num_heads=2, d_model=16,
                                activation="gelu_tanh", tie_weights=True)).save_pretrained(folder)
    bpe.save(str(folder / "tokenizer.json"))
    metrics = result_of(run_lesson("06", folder, tmp_path))
    assert 0 <= metrics["gpt2_prev_token_score_max"] <= 1
    assert (tmp_path / "plots" / "06_gpt2_previous_token.png").exists()
    (folder / "tokenizer.json").unlink()
    no_tokenizer = run_lesson("06", folder, tmp_path)
    assert no_tokenizer.returncode != 0 and "Traceback" not in no_tokenizer.stderr
    assert len(no_tokenizer.stderr.strip().splitlines()) == 1 and "a prompt needs it" in no_tokenizer.stderr
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-100])           # a damaged weight file: CheckpointError
    damaged = run_lesson("06", folder, tmp_path)
    assert damaged.returncode != 0 and "Traceback" not in damaged.stderr
    assert damaged.stderr.strip().splitlines()[0].startswith(f"--weights {folder}: {folder / 'model.safetensors'} "
                                                              "is truncated")
    missing = run_lesson("06", tmp_path / "nowhere", tmp_path)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == [f"--weights {tmp_path / 'nowhere'}: {tmp_path / 'nowhere'} is not "
                                                   "a folder; from_pretrained takes a folder holding config.json and "
                                                   "model.safetensors, or a Hugging Face hub name such as 'gpt2'"]


def test_lesson_08_classifies_the_sample_photo_with_a_vit_folder(tmp_path):
    ta.manual_seed(0)
    model = models.ViT(models.ViTConfig(image_size=32, patch_size=8, in_chans=3, num_classes=3, d_model=16, depth=2,
                                        num_heads=2))
    metrics = result_of(run_lesson("08", vit_files(tmp_path, model, {0: "cat", 1: "dog", 2: "fish"}), tmp_path))
    assert metrics["pretrained_top_class"] in {"cat", "dog", "fish"}
    assert 1 / 3 <= metrics["pretrained_top_probability"] <= 1
    assert (tmp_path / "plots" / "08_vit_pretrained_class_attention.png").exists()


def test_lesson_20_scores_a_gpt2_folders_heads(tmp_path):
    folder = tmp_path / "gpt2"
    models.GPT(models.GPTConfig(vocab_size=300, block_size=40, n_layer=3, num_heads=2, d_model=16,
                                activation="gelu_tanh", tie_weights=True)).save_pretrained(folder)
    metrics = result_of(run_lesson("20", folder, tmp_path))
    assert 0 <= metrics["gpt2_induction_score_max"] <= 1 and 0 <= metrics["gpt2_prev_token_score_max"] <= 1
    assert (tmp_path / "plots" / "20_gpt2_head_scores.png").exists()
