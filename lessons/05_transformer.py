# %% [markdown]
# # 05 · The Transformer: translation with attention alone
#
# "Attention Is All You Need" (Vaswani et al. 2017) drops recurrence: the encoder is self-attention plus a
# feed-forward network, repeated; the decoder adds causal self-attention (a position sees only earlier targets) and
# cross-attention over the encoder's output. Positions come from sinusoidal encodings. Here it translates English
# number words into digits: "three thousand forty two" -> 3042. The zero is written by no word: the decoder has
# to infer it from what is missing, and the cross-attention maps show where each digit looked.

# %%
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.datasets import NumberWords
from tinyattn.lesson import options, plot_path, progress, quick_note, report

args = options(__doc__)                 # also seeds tinyattn's generator: --seed N
data = NumberWords(n=3000 if args.quick else 30000)
for i in range(3):
    print(" ".join(data.words[i]), "->", data.digits[i])

# %% [markdown]
# ## The model
# Post-norm, as in the paper: each sub-layer is LayerNorm(x + sublayer(x)). tinyattn/models/transformer.py reads
# top to bottom as the architecture diagram.
#
# Exercise: LayerNorm's forward and backward, `lessons/exercises/layer_norm_backward.py` (`python -m lessons check
# layer_norm_backward` grades it and trains a GPT on it).

# %%
config = models.TransformerConfig(src_vocab=len(data.src_vocab), tgt_vocab=len(data.tgt_vocab), d_model=64,
                                  num_heads=4, n_layers=1 if args.quick else 2, dropout=0.0 if args.quick else 0.1)
model = models.Transformer(config)
print(f"{model.num_parameters():,} parameters")

# %% [markdown]
# ## Training
# AdamW with a linear warm-up and cosine decay (post-norm Transformers are fragile in their first steps).

# %%
steps, batch_size = (80, 64) if args.quick else (600, 128)
optimizer = optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(warmup_steps=steps // 10, total_steps=steps))
rng = np.random.default_rng(args.seed)
train = data.split["train"]
losses = []
for step in (bar := progress(range(steps), desc="training")):
    rows = rng.choice(train, batch_size)
    src, tgt = data.src[rows], data.tgt[rows]
    logits = model(ta.tensor(src), ta.tensor(tgt[:, :-1]))
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ta.tensor(tgt[:, 1:].reshape(-1)), ignore_index=0)
    optimizer.zero_grad()
    loss.backward()
    optim.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    losses.append(loss.item())
    if step % 20 == 0:
        bar.set_postfix(loss=f"{losses[-1]:.3f}")

# %% [markdown]
# ## Test exact match, and the cross-attention of each head
# Greedy decoding: the decoder starts from BOS and feeds back its own predictions.

# %%
model.eval()
test = data.split["test"]
ids, maps = model.greedy_decode(ta.tensor(data.src[test]), max_len=8)
decoded = [data.tgt_vocab.decode(row) for row in ids.numpy()]
exact = float(np.mean([d == data.digits[i] for d, i in zip(decoded, test)]))
print(f"test exact match {exact:.3f}" + quick_note(args))
for d, i in list(zip(decoded, test))[:5]:
    print(f"  {' '.join(data.words[i]):50} -> {d}")

# %%
example = next(row for row, i in enumerate(test) if "0" in data.digits[i] and len(data.words[i]) >= 4)
words = data.words[test[example]]
outputs = list(decoded[example]) + ["<eos>"]
last_layer = maps[-1].numpy()[example][:, :len(outputs), :len(words)]
fig = viz.attention_grid(last_layer[None], words, outputs, row_names=[f"layer {len(maps) - 1}"],
                         title=f"cross-attention: {' '.join(words)} -> {decoded[example]}")
viz.save(fig, plot_path(args, "05_cross_attention.png"))
viz.save(viz.curves({"train loss": losses}, logy=True), plot_path(args, "05_loss.png"))

# %% [markdown]
# Every layer's cross-attention, head by head, one output digit at a time (sliders in a notebook or when stepping on
# a display; `explorer.select(layer=0, head=1, query=2)` elsewhere).

# %%
explorer = viz.explore_attention([m.numpy()[example][:, :len(outputs), :len(words)] for m in maps], words, outputs,
                                 title="cross-attention")

# %%
if not args.quick:
    assert exact >= 0.95, exact
report(translation_exact_match=exact, parameters=model.num_parameters())
