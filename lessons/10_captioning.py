# %% [markdown]
# # 10 · Show, attend and tell: captions for strips of digits
#
# An image of three handwritten digits side by side; the caption in words, "three one four". The image is cut into
# 4x4 patches and encoded (patch embedding, positions, a Transformer block); a GRU decoder writes one word at a time
# and, before each word, attends over the patches with additive attention (Xu et al. 2015), the same decoder as the
# translation lesson's. If it learns what we hope, each word's attention sits on its digit.

# %%
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.datasets import DigitStrips
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__)                 # also seeds tinyattn's generator: --seed N
data = DigitStrips(n=800 if args.quick else 6000, length=3)
print("caption of strip 0:", data.vocab.decode(data.captions[0], " "))

# %%
config = models.CaptionerConfig(image_height=8, image_width=24, patch_size=4, vocab=len(data.vocab), d_model=64,
                                num_heads=4, embed_dim=32, hidden=64, attention_dim=64)
model = models.Captioner(config)
print(f"{model.num_parameters():,} parameters, {model.grid[0] * model.grid[1]} patches of 4x4")

# %%
steps, batch_size = (40, 32) if args.quick else (2000, 64)
optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(steps // 10, steps))
rng = np.random.default_rng(args.seed)
train = data.split["train"]
losses = []
for step in (bar := progress(range(steps), desc="training")):
    rows = rng.choice(train, batch_size)
    captions = data.captions[rows]
    logits, _ = model(ta.tensor(data.images[rows]), ta.tensor(captions[:, :-1]))
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ta.tensor(captions[:, 1:].reshape(-1)))
    train_step(loss, optimizer, schedule, clip_parameters=model.parameters())
    losses.append(loss.item())
    if step % 20 == 0:
        bar.set_postfix(loss=f"{losses[-1]:.3f}")

# %% [markdown]
# ## Test captions, and where each word looked
# Exact match: all three words right. Attention on the right digit: for each word, does most of its attention mass
# fall on the patches of the digit it names?

# %%
model.eval()
test = data.split["test"]
ids, weights = model.greedy_decode(ta.tensor(data.images[test]), max_len=3)
ids, weights = ids.numpy(), weights.numpy()                            # weights (N, 3 words, 12 patches)
exact = float((ids == data.captions[test, 1:4]).all(axis=1).mean())
grid_h, grid_w = model.grid
per_digit = weights.reshape(len(test), 3, grid_h, grid_w).sum(2).reshape(len(test), 3, 3, grid_w // 3).sum(-1)
on_its_digit = float((per_digit.argmax(-1) == np.arange(3)).mean())
print(f"test exact match {exact:.3f}; words whose attention peaks on their own digit: {on_its_digit:.3f}"
      + quick_note(args))

fig, axes = viz.plt.subplots(3, 3, figsize=(10, 5.2))
for row, example in enumerate(range(3)):
    words = data.vocab.decode(ids[example], " ").split() + ["?"] * 3
    gold = data.vocab.decode(data.captions[test[example], 1:4], " ").split()
    for word in range(3):
        ax = axes[row, word]
        viz.patch_attention(data.images[test[example], 0], weights[example, word], model.grid, ax=ax,
                            title=f"word {word + 1}: {words[word]} (gold: {gold[word]})")
        ax.title.set_color("black" if words[word] == gold[word] else "red")
    axes[row, 0].set_ylabel(f"test strip {example}\ngold: {' '.join(gold)}", fontsize=8)
fig.suptitle("attention over the 4x4 patches before each generated word (red title: word differs from gold)",
             fontsize=10)
viz.save(fig, plot_path(args, "10_caption_attention.png"))
viz.save(viz.curves({"train loss": losses}, logy=True), plot_path(args, "10_loss.png"))

# %% [markdown]
# The first strip's weights as a table, one row per generated word and one column per patch (row r, column c of the
# patch grid): pick a word and see its weight on every patch (a slider in a notebook or when stepping on a display).

# %%
patches = [f"r{r}c{c}" for r in range(grid_h) for c in range(grid_w)]
words = (data.vocab.decode(ids[0], " ").split() + ["?"] * 3)[:3]          # "?" where it stopped early
explorer = viz.explore_attention(weights[0, None, None], patches, words,
                                 title="caption attention over patches")

# %%
if not args.quick:
    assert exact >= 0.9, exact
report(caption_exact_match=exact, caption_attention_on_digit=on_its_digit, parameters=model.num_parameters())
