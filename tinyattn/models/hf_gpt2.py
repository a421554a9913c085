"""GPT-2 as Hugging Face stores it <-> models.GPT: the one place that knows the other layout.

GPT-2 is the architecture models.GPT already has with learned positions, pre-norm LayerNorm, a 4x GELU MLP (the tanh
approximation, "gelu_new") and the head tied to the token embedding. What differs is naming and one layout: GPT-2's
linear layers are `Conv1D`s, which store their weight as (in, out) and compute x W + b, where nn.Linear stores
(out, in) and computes x W^T + b; so every Conv1D weight is transposed on the way in and out.

    hub file (no prefix) / save_pretrained ("transformer." prefix)      models.GPT
    wte.weight                                                          tok_emb.weight
    wpe.weight                                                          pos_emb.weight
    h.N.ln_1.{weight,bias}                                              blocks.N.ln1
    h.N.attn.c_attn.{weight,bias}   (q, k, v side by side)              blocks.N.attn.qkv       (transposed)
    h.N.attn.c_proj.{weight,bias}                                       blocks.N.attn.out_proj  (transposed)
    h.N.ln_2.{weight,bias}                                              blocks.N.ln2
    h.N.mlp.c_fc.{weight,bias}                                          blocks.N.mlp.fc1        (transposed)
    h.N.mlp.c_proj.{weight,bias}                                        blocks.N.mlp.fc2        (transposed)
    ln_f.{weight,bias}                                                  ln_f
    lm_head.weight (only when not tied)                                 head.weight
Older files also carry each layer's causal mask as buffers (h.N.attn.bias, h.N.attn.masked_bias): skipped; and
some give the context length as n_ctx only, read where n_positions is absent. GPT-2's three dropouts (resid_pdrop,
embd_pdrop, attn_pdrop) become models.GPT's one, resid_pdrop's: dropout is a training setting and from_pretrained
returns an eval model (GPT.from_pretrained(folder, dropout=...) sets it). A file that stores lm_head.weight although
config.json ties it loads as transformers 5 loads it: tied when the two are equal, else both kept, untied, with a
warning.
"""
import re
import warnings

from ..hub import PretrainedError, required

ACTIVATIONS_IN = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
ACTIVATIONS_OUT = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
# settings of GPT-2 that change its computation in ways models.GPT has no switch for, with the value it can run
FIXED = {"scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True, "add_cross_attention": False}
LAYER_PARTS = {"ln_1": "ln1", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.out_proj", "ln_2": "ln2",
               "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
CONV1D = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}        # weights stored (in, out)
MASK_BUFFERS = re.compile(r"h\.\d+\.attn\.(masked_)?bias$")


def config_from_hf(hf, source):
    """GPTConfig's settings from a GPT-2 config.json (a dict); a setting GPTConfig cannot express is refused."""
    model_type = hf.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise PretrainedError(f"{source}/config.json is a {model_type!r} model; GPT.from_pretrained reads GPT-2 "
                              "(model_type 'gpt2')")
    for key, runnable in FIXED.items():
        if hf.get(key, runnable) != runnable:
            raise PretrainedError(f"{source}/config.json sets {key}={hf[key]!r}; models.GPT runs GPT-2 with "
                                  f"{key}={runnable!r} only")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS_IN:
        raise PretrainedError(f"{source}/config.json sets activation_function={activation!r}; models.GPT has "
                              f"{sorted(ACTIVATIONS_IN)}")
    d_model = required(hf, "n_embd", source)
    return dict(vocab_size=required(hf, "vocab_size", source),
                block_size=_context(hf, source),
                n_layer=required(hf, "n_layer", source),
                num_heads=required(hf, "n_head", source), d_model=d_model,
                mlp_hidden=hf.get("n_inner") or 4 * d_model, activation=ACTIVATIONS_IN[activation],
                norm_eps=hf.get("layer_norm_epsilon", 1e-5), dropout=hf.get("resid_pdrop", 0.1),
                tie_weights=hf.get("tie_word_embeddings", True),
                norm="layer", prenorm=True, mlp="gelu", position="learned", bias=True, num_kv_heads=None)


def _context(hf, source):
    """n_positions, or n_ctx in older files that give only that."""
    if "n_positions" not in hf and "n_ctx" not in hf:
        raise PretrainedError(f"{source}/config.json has neither 'n_positions' nor 'n_ctx', which the model needs")
    return hf.get("n_positions", hf.get("n_ctx"))


def key_map(n_layer):
    """{GPT-2 name (no prefix): (models.GPT name, stored transposed)} for a model of n_layer blocks."""
    names = {"wte.weight": ("tok_emb.weight", False), "wpe.weight": ("pos_emb.weight", False),
             "ln_f.weight": ("ln_f.weight", False), "ln_f.bias": ("ln_f.bias", False),
             "lm_head.weight": ("head.weight", False)}
    for i in range(n_layer):
        for theirs, ours in LAYER_PARTS.items():
            names[f"h.{i}.{theirs}.weight"] = (f"blocks.{i}.{ours}.weight", theirs in CONV1D)
            names[f"h.{i}.{theirs}.bias"] = (f"blocks.{i}.{ours}.bias", False)
    return names


def state_dict_from_hf(weights, config, source):
    """models.GPT's state_dict from the arrays of a GPT-2 file (either key spelling), and where each came from
    {name: (file's key, stored transposed)}; keys that are missing or that mean nothing to models.GPT are named."""
    names = key_map(config.n_layer)
    state, origin, unknown = {}, {}, []
    for key, array in weights.items():
        name = key[len("transformer."):] if key.startswith("transformer.") else key
        if MASK_BUFFERS.match(name):
            continue
        if name not in names:
            unknown.append(key)
            continue
        ours, transposed = names[name]
        state[ours] = array.T if transposed else array
        origin[ours] = (key, transposed)
    if config.tie_weights and "head.weight" in state and "tok_emb.weight" in state:
        if (state["head.weight"] == state["tok_emb.weight"]).all():
            del state["head.weight"]                          # a redundant copy of the tied weight
        else:                                                 # as transformers 5: keep both, untied, and say so
            warnings.warn(f"{source}: config.json ties the head to the token embedding, but the file's "
                          "lm_head.weight differs from wte.weight; loading both, untied, as transformers does")
            config.tie_weights = False
    if config.tie_weights and "tok_emb.weight" in state:
        state["head.weight"] = state["tok_emb.weight"]        # the head is the token embedding, stored once
        origin["head.weight"] = origin["tok_emb.weight"]
    missing = sorted({ours for ours, _ in names.values()} - set(state))
    if unknown or missing:
        raise PretrainedError(f"{source} is not GPT-2 as its config.json describes it"
                              + (f"; keys models.GPT has no place for: {unknown[:8]}" if unknown else "")
                              + (f"; missing (in models.GPT's names): {missing[:8]}" if missing else ""))
    return state, origin


def config_to_hf(config):
    """A GPT-2 config.json (a dict) for a GPTConfig; a model GPT-2 cannot express is refused naming the setting."""
    cannot = {"position": (config.position, "learned"), "norm": (config.norm, "layer"), "mlp": (config.mlp, "gelu"),
              "prenorm": (config.prenorm, True), "bias": (config.bias, True),
              "num_kv_heads": (config.num_kv_heads or config.num_heads, config.num_heads)}
    for key, (value, gpt2) in cannot.items():
        if value != gpt2:
            raise ValueError(f"GPT-2 cannot express GPTConfig({key}={value!r}): it has {key}={gpt2!r}; "
                             "save_pretrained writes GPT-2 files only (ta.save(model.state_dict(), path) keeps any "
                             "model)")
    d = config.d_model
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": config.vocab_size,
            "n_positions": config.block_size, "n_embd": d, "n_layer": config.n_layer, "n_head": config.num_heads,
            "n_inner": None if (config.mlp_hidden or 4 * d) == 4 * d else config.mlp_hidden,
            "activation_function": ACTIVATIONS_OUT[config.activation],
            "layer_norm_epsilon": 1e-5 if config.norm_eps is None else config.norm_eps,
            "resid_pdrop": config.dropout, "embd_pdrop": config.dropout, "attn_pdrop": config.dropout,
            "tie_word_embeddings": config.tie_weights, "scale_attn_weights": True,
            # GPT-2's <|endoftext|> id, where the vocabulary has it; transformers warns of an id outside it
            "bos_token_id": 50256 if config.vocab_size > 50256 else None,
            "eos_token_id": 50256 if config.vocab_size > 50256 else None}


def state_dict_to_hf(state, config):
    """GPT-2's keys (with transformers' "transformer." prefix) and Conv1D layouts for models.GPT's state_dict."""
    back = {ours: (theirs, transposed) for theirs, (ours, transposed) in key_map(config.n_layer).items()}
    weights = {}
    for name, tensor in state.items():
        if name == "head.weight" and config.tie_weights:
            continue                                          # transformers ties lm_head to wte when it reads it
        theirs, transposed = back[name]
        key = theirs if theirs.startswith("lm_head.") else "transformer." + theirs
        weights[key] = tensor.T if transposed else tensor
    return weights
