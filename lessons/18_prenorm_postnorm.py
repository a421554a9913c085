# %% [markdown]
# # 18 · Pre-norm against post-norm in a deep stack, without warm-up
#
# The 2017 Transformer normalises after the residual add, x = LayerNorm(x + f(x)) (post-norm); GPT-2 and nearly
# everything since normalise inside the residual branch, x = x + f(LayerNorm(x)) (pre-norm). Nguyen and Salazar
# (2019, "Transformers without Tears") found pre-norm trains more stably; Xiong et al. (2020, "On Layer Normalization in
# the Transformer Architecture") trace post-norm's need for a learning-rate warm-up to it, and find that pre-norm
# trains without one.
#
# Lesson 07 compared the two on a 2-layer model with warm-up. Here the setting where they should differ: 12 layers
# and a constant learning rate from the first step. The model is lesson 06's character GPT (`models.GPT`, its
# `prenorm` flag), on Python's own standard library source; every run sees the same batches. Controls: the same two
# at 2 layers, and both at 12 layers with a warm-up. Losses are in nats per character; the line to beat is the
# unigram model (each character's frequency, no context), whose loss is the entropy of the character counts.

# %%
import time

import numpy as np

import tinyattn as ta
from tinyattn import models, optim, viz
from tinyattn.datasets import CharCorpus
from tinyattn.lesson import options, plot_path, progress, quick_note, report

args = options(__doc__)
corpus = CharCorpus(max_chars=60_000 if args.quick else None)
steps, batch_size, block = (12, 8, 32) if args.quick else (200, 16, 32)
lr, warmup = 3e-3, 60
counts = np.bincount(corpus.train, minlength=len(corpus.vocab)) + 1.0
unigram = float(-(counts / counts.sum() * np.log(counts / counts.sum())).sum())
print(f"{len(corpus.train):,} training characters, {len(corpus.vocab)} symbols; unigram loss {unigram:.3f} nats")

# %%
def train(n_layer, prenorm, seed=0, warmup_steps=0):
    """AdamW at a constant lr (after an optional linear warm-up); returns the per-step losses, the validation loss,
    the gradient norm of each block at the first step, and seconds."""
    ta.manual_seed(seed)
    model = models.GPT(models.GPTConfig(vocab_size=len(corpus.vocab), block_size=block, n_layer=n_layer,
                                        num_heads=4, d_model=64, prenorm=prenorm))
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = optim.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup_steps) if warmup_steps else 1.0)
    rng = np.random.default_rng(args.seed)                          # the same batches for every run
    losses, start = [], time.perf_counter()
    label = f"{n_layer} layers, {'pre' if prenorm else 'post'}-norm, seed {seed}" + (", warm-up" if warmup_steps
                                                                                       else "")
    for step in progress(range(steps), desc=label):
        x, y = corpus.batch("train", batch_size, block, rng)
        _, loss = model(ta.tensor(x), ta.tensor(y))
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            first_grads = [float(np.sqrt(sum(float((p.grad.numpy() ** 2).sum()) for p in b.parameters())))
                           for b in model.blocks]
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    eval_rng = np.random.default_rng(args.seed + 1)
    with ta.no_grad():
        val = float(np.mean([model(ta.tensor(x), ta.tensor(y))[1].item()
                             for x, y in (corpus.batch("val", 32, block, eval_rng) for _ in range(8))]))
    return {"losses": losses, "val": val, "first_grads": first_grads, "seconds": time.perf_counter() - start}


runs = {}                        # (layers, prenorm, seed, warm-up) -> run
seeds = [args.seed + i for i in range(1 if args.quick else 2)]
first = seeds[0]                 # the warm-up and 2-layer runs, the gradients and the plot use the first seed
for seed in seeds:
    for prenorm in (True, False):
        runs[(12, prenorm, seed, False)] = train(12, prenorm, seed)
for prenorm in (True, False):
    runs[(12, prenorm, first, True)] = train(12, prenorm, first, warmup)
for prenorm in (True, False):
    runs[(2, prenorm, first, False)] = train(2, prenorm, first)

# %%
def name(key):
    layers, prenorm, seed, warm = key
    return f"{layers:2} layers, {'pre' if prenorm else 'post'}-norm, " + (f"{warmup}-step warm-up" if warm else
                                                                          "no warm-up") + f", seed {seed}"


tail = max(1, steps // 10)
print(f"lr {lr}, {steps} steps of {batch_size} x {block} characters; unigram loss {unigram:.3f} nats")
print(f"{'run':45} {'last ' + str(tail) + ' steps':>14} {'validation':>11} {'seconds':>8}" + quick_note(args))
for key, run in runs.items():
    print(f"{name(key):45} {np.mean(run['losses'][-tail:]):14.3f} {run['val']:11.3f} {run['seconds']:8.1f}")

pre = [runs[(12, True, s, False)]["val"] for s in seeds]
post = [runs[(12, False, s, False)]["val"] for s in seeds]
print(f"12 layers, no warm-up: pre-norm {' '.join(f'{v:.3f}' for v in pre)}, post-norm "
      f"{' '.join(f'{v:.3f}' for v in post)} (validation, per seed); post-norm ends "
      f"{np.mean(post) - unigram:+.3f} nats from the unigram loss, pre-norm {np.mean(pre) - unigram:+.3f}")
spread = max(max(pre) - min(pre), max(post) - min(post))
print(f"12 layers, no warm-up: post-norm ends {np.mean(post) - np.mean(pre):+.3f} nats against pre-norm (means over "
      f"seeds); the seeds of one setting differ by up to {spread:.3f}")
print(f"with a {warmup}-step warm-up: pre-norm {runs[(12, True, first, True)]['val']:.3f}, post-norm "
      f"{runs[(12, False, first, True)]['val']:.3f}; at 2 layers without: pre-norm "
      f"{runs[(2, True, first, False)]['val']:.3f}, post-norm {runs[(2, False, first, False)]['val']:.3f}")

# %% [markdown]
# ## The gradients at the first step
# One thing that differs before any training: how the gradient is spread over the depth. The norm of the gradient of
# each block's parameters at the first step, from the bottom block (0) to the top:

# %%
for prenorm in (True, False):
    grads = runs[(12, prenorm, first, False)]["first_grads"]
    print(f"{'pre' if prenorm else 'post'}-norm: " + " ".join(f"{g:.2f}" for g in grads)
          + f"   (bottom / top = {grads[0] / grads[-1]:.1f})")

# %%
fig, ax = viz.plt.subplots(figsize=(7, 3.6))
smooth = lambda c: np.convolve(c, np.ones(10) / 10, mode="valid") if len(c) >= 10 else np.asarray(c)
styles = {(12, True): ("tab:blue", "-"), (12, False): ("tab:red", "-"), (2, True): ("tab:blue", ":"),
          (2, False): ("tab:red", ":")}
for key, run in runs.items():
    layers, prenorm, seed, warm = key
    if seed != first:
        continue
    colour, style = styles[(layers, prenorm)]
    ax.plot(smooth(run["losses"]), color=colour, linestyle="--" if warm else style, label=name(key)[:-8])
ax.axhline(unigram, color="0.4", linewidth=1, label="unigram (no context)")
ax.set_xlabel("step")
ax.set_ylabel("training loss (nats/char, mean of 10 steps)")
ax.set_title(f"character GPT, d_model 64, constant lr {lr} (or a {warmup}-step warm-up)", fontsize=10)
ax.legend(fontsize=7, loc="upper right")
ax.grid(alpha=0.3)
viz.save(fig, plot_path(args, "18_prenorm_postnorm.png"))

# %%
report(prenorm_deep_final_loss=float(np.mean(pre)), postnorm_deep_final_loss=float(np.mean(post)),
       unigram_loss=unigram, prenorm_deep_warmup_loss=runs[(12, True, first, True)]["val"],
       postnorm_deep_warmup_loss=runs[(12, False, first, True)]["val"],
       prenorm_shallow_loss=runs[(2, True, first, False)]["val"],
       postnorm_shallow_loss=runs[(2, False, first, False)]["val"],
       loss_unit="validation nats/char", seeds=len(pre))
