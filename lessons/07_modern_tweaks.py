# %% [markdown]
# # 07 · Modern tweaks to the Transformer, measured
#
# Since 2017 the block has changed in small ways that add up. Each variant below is the character LM of lesson 06
# with one thing changed, trained for the same steps on the same batches:
# - **post-norm** (the 2017 original, norm after the residual add) against **pre-norm** (GPT-2 on, norm before);
# - **RMSNorm** (Zhang & Sennrich 2019): LayerNorm without the mean, no bias;
# - **SwiGLU** (Shazeer 2020): a gated feed-forward, (silu(x W1) * x W2) W3, hidden 8D/3 to keep parameters equal;
# - **MoE** (Shazeer et al. 2017; Switch Transformer): 4 expert MLPs, 2 chosen per token by a router, plus a
#   load-balancing loss; more parameters, about the same compute per token;
# - **GQA / MQA** (Ainslie et al. 2023; Shazeer 2019): queries keep 4 heads but share 2 or 1 key/value heads, which
#   shrinks the KV cache that dominates memory at inference.

# %%
import time

import numpy as np

import tinyattn as ta
from tinyattn import models, optim, viz
from tinyattn.data import CharCorpus
from common import options, plot_path, progress, report

args = options(__doc__)
corpus = CharCorpus(max_chars=60_000 if args.quick else None)
base = dict(vocab_size=len(corpus.vocab), block_size=64, n_layer=2, num_heads=4, d_model=64)
variants = {
    "pre-norm (baseline)": {},
    "post-norm": {"prenorm": False},
    "RMSNorm": {"norm": "rms"},
    "SwiGLU": {"mlp": "swiglu"},
    "MoE 4x top-2": {"mlp": "moe", "n_experts": 4, "top_k": 2},
    "GQA (2 KV heads)": {"num_kv_heads": 2},
    "MQA (1 KV head)": {"num_kv_heads": 1},
}
steps, batch_size = (15, 8) if args.quick else (150, 16)

# %%
def train(overrides, label):
    ta.manual_seed(0)
    model = models.GPT(models.GPTConfig(**base, **overrides))
    optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(steps // 10, steps, 0.1))
    rng = np.random.default_rng(0)                       # the same batches for every variant
    curve, start = [], time.perf_counter()
    for _ in progress(range(steps), desc=label):
        x, y = corpus.batch("train", batch_size, base["block_size"], rng)
        _, loss = model(ta.tensor(x), ta.tensor(y))
        optimizer.zero_grad()
        (loss + 0.01 * model.aux_loss()).backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        curve.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    eval_rng = np.random.default_rng(1)
    with ta.no_grad():
        val = np.mean([model(ta.tensor(x), ta.tensor(y))[1].item()
                       for x, y in (corpus.batch("val", 16, base["block_size"], eval_rng) for _ in range(8))])
    kv_bytes = sum(block.attn.kv_cache_bytes_per_token() for block in model.blocks)
    return {"parameters": model.num_parameters(), "kv_cache_bytes_per_token": kv_bytes,
            "val_bits_per_char": float(val / np.log(2)), "seconds": seconds, "curve": curve}


table = {name: train(overrides, name) for name, overrides in variants.items()}

# %%
print(f"{'variant':22} {'params':>8} {'KV bytes/token':>15} {'val bits/char':>14} {'seconds':>8}")
for name, row in table.items():
    print(f"{name:22} {row['parameters']:8,} {row['kv_cache_bytes_per_token']:15,} "
          f"{row['val_bits_per_char']:14.3f} {row['seconds']:8.1f}")
smooth = lambda c: np.convolve(c, np.ones(10) / 10, mode="valid") if len(c) >= 10 else c
viz.save(viz.curves({name: smooth(row["curve"]) for name, row in table.items()}, title="same steps, same batches"),
         plot_path(args, "07_modern_tweaks.png"))

# %%
baseline = table["pre-norm (baseline)"]
assert table["MQA (1 KV head)"]["kv_cache_bytes_per_token"] * 4 == baseline["kv_cache_bytes_per_token"]
assert table["GQA (2 KV heads)"]["kv_cache_bytes_per_token"] * 2 == baseline["kv_cache_bytes_per_token"]
assert table["MoE 4x top-2"]["parameters"] > 2 * baseline["parameters"] * 0.8
report(**{f"{name.split(' ')[0].lower()}_val_bpc": row["val_bits_per_char"] for name, row in table.items()},
       kv_bytes_per_token={name: row["kv_cache_bytes_per_token"] for name, row in table.items()},
       parameters={name: row["parameters"] for name, row in table.items()})
