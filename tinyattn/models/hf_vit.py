"""Hugging Face's ViTForImageClassification files (google/vit-base-patch16-224) -> models.ViT: the one place that
knows that layout.

    Hugging Face                                                    models.ViT
    vit.embeddings.cls_token (1, 1, D)                              cls_token
    vit.embeddings.position_embeddings (1, 1 + N, D)                pos_embed
    vit.embeddings.patch_embeddings.projection (Conv2d, D, C, p, p) patch_embed.proj (Linear, D, C*p*p)
    vit.encoder.layer.N.layernorm_before                            blocks.N.norm1
    vit.encoder.layer.N.attention.attention.{query,key,value}       blocks.N.attn.qkv (the three stacked)
    vit.encoder.layer.N.attention.output.dense                      blocks.N.attn.out_proj
    vit.encoder.layer.N.layernorm_after                             blocks.N.norm2
    vit.encoder.layer.N.intermediate.dense                          blocks.N.mlp.fc1
    vit.encoder.layer.N.output.dense                                blocks.N.mlp.fc2
    vit.layernorm                                                   norm
    classifier                                                      head
The patch projection is a convolution with kernel = stride = p; flattening its (C, p, p) kernel in that order is the
Linear that PatchEmbed applies to patches flattened in (c, y, x) order.
"""
from .. import backend
from ..hub import PretrainedError, required

LAYER_PARTS = {"layernorm_before": "norm1", "attention.output.dense": "attn.out_proj", "layernorm_after": "norm2",
               "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}


def config_from_hf(hf, source):
    """ViTConfig's settings from a ViT config.json; a setting ViTConfig cannot express is refused naming it."""
    if hf.get("model_type", "vit") != "vit":
        raise PretrainedError(f"{source}/config.json is a {hf['model_type']!r} model; ViT.from_pretrained reads "
                              "model_type 'vit'")
    if hf.get("hidden_act", "gelu") != "gelu":
        raise PretrainedError(f"{source}/config.json sets hidden_act={hf['hidden_act']!r}; models.ViT has 'gelu'")
    if not hf.get("qkv_bias", True):
        raise PretrainedError(f"{source}/config.json sets qkv_bias=false; models.ViT's attention has biases")
    d_model = required(hf, "hidden_size", source)
    hidden = required(hf, "intermediate_size", source)
    if hidden % d_model:
        raise PretrainedError(f"{source}/config.json sets intermediate_size={hidden}, not a multiple of "
                              f"hidden_size={d_model}; models.ViT's MLP is mlp_ratio * d_model wide")
    id2label = {int(k): v for k, v in hf.get("id2label", {}).items()} or None
    return dict(image_size=required(hf, "image_size", source),
                patch_size=required(hf, "patch_size", source),
                in_chans=hf.get("num_channels", 3), d_model=d_model,
                depth=required(hf, "num_hidden_layers", source),
                num_heads=required(hf, "num_attention_heads", source), mlp_ratio=hidden // d_model,
                num_classes=len(id2label) if id2label else hf.get("num_labels", 2),
                norm_eps=hf.get("layer_norm_eps", 1e-12), id2label=id2label, position="learned", pool="cls")


def state_dict_from_hf(weights, config, source):
    """models.ViT's state_dict from the arrays of a ViTForImageClassification file, and where each came from
    {name: (file's key, stored transposed)}; keys that are missing or that mean nothing to models.ViT are named."""
    names = {"vit.embeddings.cls_token": "cls_token", "vit.embeddings.position_embeddings": "pos_embed",
             "vit.embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
             "vit.embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
             "vit.layernorm.weight": "norm.weight", "vit.layernorm.bias": "norm.bias",
             "classifier.weight": "head.weight", "classifier.bias": "head.bias"}
    for i in range(config.depth):
        for theirs, ours in LAYER_PARTS.items():
            for kind in ("weight", "bias"):
                names[f"vit.encoder.layer.{i}.{theirs}.{kind}"] = f"blocks.{i}.{ours}.{kind}"
    qkv = {f"vit.encoder.layer.{i}.attention.attention.{part}.{kind}": (i, part, kind)
           for i in range(config.depth) for part in ("query", "key", "value") for kind in ("weight", "bias")}
    state, origin, parts, unknown = {}, {}, {}, []
    for key, array in weights.items():
        if key in names:
            state[names[key]] = array
            origin[names[key]] = (key, False)
        elif key in qkv:
            parts[qkv[key]] = array
        elif not key.startswith("vit.pooler."):           # ViTModel's pooler: not used for classification
            unknown.append(key)
    for (i, part, kind) in list(parts):
        if part == "query" and all((i, p, kind) in parts for p in ("key", "value")):
            state[f"blocks.{i}.attn.qkv.{kind}"] = backend.numpy.concatenate([parts[(i, p, kind)]
                                                                      for p in ("query", "key", "value")])
            origin[f"blocks.{i}.attn.qkv.{kind}"] = (f"vit.encoder.layer.{i}.attention.attention.{{query,key,value}}"
                                                    f".{kind} (stacked)", False)
    if "patch_embed.proj.weight" in state:                   # (D, C, p, p) -> (D, C*p*p)
        state["patch_embed.proj.weight"] = state["patch_embed.proj.weight"].reshape(config.d_model, -1)
    expected = set(names.values()) | {f"blocks.{i}.attn.qkv.{k}" for i in range(config.depth)
                                      for k in ("weight", "bias")}
    missing = sorted(expected - set(state))
    if unknown or missing:
        raise PretrainedError(f"{source} is not a ViTForImageClassification as its config.json describes it"
                              + (f"; keys models.ViT has no place for: {unknown[:8]}" if unknown else "")
                              + (f"; missing (in models.ViT's names): {missing[:8]}" if missing else ""))
    return state, origin
