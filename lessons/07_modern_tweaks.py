# %% [markdown]
# # 07 · Modern tweaks to the Transformer, measured
#
# Since 2017 the block has changed in small ways that add up. Each variant below is the character LM of lesson 06
# with one thing changed, trained for the same steps on the same batches, from a few seeds:
# - **post-norm** (the 2017 original, norm after the residual add) against **pre-norm** (GPT-2 on, norm before);
# - **RMSNorm** (Zhang & Sennrich 2019): LayerNorm without the mean, no bias;
# - **SwiGLU** (Shazeer 2020): a gated feed-forward, (silu(x W1) * x W2) W3, hidden 8D/3 to keep parameters equal;
# - **MoE** (Shazeer et al. 2017; Switch Transformer): 4 expert MLPs, each as large as the baseline's, 2 chosen per
#   token by a router, plus a load-balancing loss. Four times the feed-forward parameters, and each token runs two
#   experts: twice the feed-forward compute. (The Switch Transformer routes each token to one expert, which keeps
#   the compute per token at the baseline's; sparse models are sold on parameters per FLOP, not on FLOPs.)
# - **GQA / MQA** (Ainslie et al. 2023; Shazeer 2019): queries keep 4 heads but share 2 or 1 key/value heads, which
#   shrinks the KV cache that dominates memory at inference.
#
# Exercises: the head sharing of GQA, forward and backward (`lessons/exercises/grouped_query.py`), and rotary
# position embeddings, RoPE (`lessons/exercises/rotary.py`); `python -m lessons check NAME` grades each.

# %%
import time

import numpy as np

import tinyattn as ta
from tinyattn import models, optim, viz
from tinyattn.datasets import CharCorpus
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

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
seeds = [args.seed + i for i in range(1 if args.quick else 3)]

# %% [markdown]
# ## Compute per token, counted
# Training FLOPs per token: 6 per weight that the token passes through in a matrix product (2 forward, 4 backward),
# plus attention's scores and weighted sums, 12 x layers x T x D (Kaplan et al. 2020): `GPT.flops_per_token`. An MoE
# token passes through the router and top_k of the experts only, so the count leaves out the experts it skips.

# %%
def train(overrides, label, seed):
    ta.manual_seed(seed)
    model = models.GPT(models.GPTConfig(**base, **overrides))
    optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(steps // 10, steps, 0.1))
    rng = np.random.default_rng(seed)                    # for one seed, the same batches for every variant
    curve, start = [], time.perf_counter()
    for _ in progress(range(steps), desc=label):
        x, y = corpus.batch("train", batch_size, base["block_size"], rng)
        _, loss = model(ta.tensor(x), ta.tensor(y))
        train_step(loss + 0.01 * model.aux_loss(), optimizer, schedule, clip_parameters=model.parameters())
        curve.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    eval_rng = np.random.default_rng(args.seed + 1)
    with ta.no_grad():
        val = np.mean([model(ta.tensor(x), ta.tensor(y))[1].item()
                       for x, y in (corpus.batch("val", 16, base["block_size"], eval_rng) for _ in range(8))])
    kv_bytes = sum(block.attn.kv_cache_bytes_per_token() for block in model.blocks)
    return {"parameters": model.num_parameters(), "kv_cache_bytes_per_token": kv_bytes,
            "flops_per_token": model.flops_per_token(base["block_size"]), "val_bits_per_char": float(val / np.log(2)),
            "seconds": seconds, "curve": curve}


runs = {name: [train(overrides, f"{name}, seed {seed}", seed) for seed in seeds]
        for name, overrides in variants.items()}
table = {}
for name, per_seed in runs.items():
    bits = np.array([run["val_bits_per_char"] for run in per_seed])
    table[name] = {**per_seed[0], "val_bits_per_char": float(bits.mean()), "bits_min": float(bits.min()),
                   "bits_max": float(bits.max()), "bits_std": float(bits.std()),
                   "seconds": float(np.mean([run["seconds"] for run in per_seed]))}
baseline = table["pre-norm (baseline)"]

# %%
print(f"{'variant':20} {'params':>7} {'KV B/token':>10} {'train MFLOP/token':>19} {'seconds':>7}   "
      f"val bits/char, mean (min-max over {len(seeds)} seeds)" + quick_note(args))
for name, row in table.items():
    print(f"{name:20} {row['parameters']:7,} {row['kv_cache_bytes_per_token']:10,} "
          f"{row['flops_per_token'] / 1e6:11.2f} ({row['flops_per_token'] / baseline['flops_per_token']:.2f}x) "
          f"{row['seconds']:7.1f}   {row['val_bits_per_char']:.3f} ({row['bits_min']:.3f}-{row['bits_max']:.3f})")
moe_flops_ratio = table["MoE 4x top-2"]["flops_per_token"] / baseline["flops_per_token"]
overlapping = [name for name, row in table.items() if name != "pre-norm (baseline)"
               and row["bits_min"] <= baseline["bits_max"] and row["bits_max"] >= baseline["bits_min"]]
print(f"MoE: {moe_flops_ratio:.2f}x the baseline's FLOPs per token, "
      f"{table['MoE 4x top-2']['seconds'] / baseline['seconds']:.2f}x its seconds on this machine")
print(f"variants whose range over seeds overlaps the baseline's: {', '.join(overlapping) or 'none'}")
viz.save(viz.bars({name.replace(" (", "\n("): row["val_bits_per_char"] for name, row in table.items()},
                  errors={name.replace(" (", "\n("): row["bits_std"] for name, row in table.items()},
                  ylabel="validation bits/char", ymin=round(min(r["bits_min"] for r in table.values()) - 0.2, 1),
                  title=f"{steps} steps each; mean and standard deviation over {len(seeds)} seed(s)"),
         plot_path(args, "07_modern_tweaks.png"))

# %% [markdown]
# The seconds include what the counts leave out: the MoE's routing and gathering of tokens per expert, Python's
# overhead per operation, and whatever else the machine was running. Losses after this many steps on a small model
# measure how fast each variant starts to learn, not where it ends; a variant whose range over seeds overlaps the
# baseline's is not shown to differ from it.

# %%
assert table["MQA (1 KV head)"]["kv_cache_bytes_per_token"] * 4 == baseline["kv_cache_bytes_per_token"]
assert table["GQA (2 KV heads)"]["kv_cache_bytes_per_token"] * 2 == baseline["kv_cache_bytes_per_token"]
assert table["MoE 4x top-2"]["parameters"] > 2 * baseline["parameters"] * 0.8
assert 1.2 < moe_flops_ratio < 2.0, moe_flops_ratio              # the feed-forward doubles; attention does not
report(**{f"{name.split(' ')[0].lower()}_val_bpc": row["val_bits_per_char"] for name, row in table.items()},
       val_bpc_range={name: [round(row["bits_min"], 4), round(row["bits_max"], 4)] for name, row in table.items()},
       kv_bytes_per_token={name: row["kv_cache_bytes_per_token"] for name, row in table.items()},
       parameters={name: row["parameters"] for name, row in table.items()},
       flops_per_token={name: row["flops_per_token"] for name, row in table.items()}, moe_flops_ratio=moe_flops_ratio,
       seeds=len(seeds))
