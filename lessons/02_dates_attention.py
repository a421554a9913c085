# %% [markdown]
# # 02 · Attention for translation: human dates to ISO 8601
#
# "Monday, April 3, 2017" -> "2017-04-03". A bidirectional GRU reads the source characters into annotations
# h_1..h_S. Before writing each output character, the decoder scores every annotation against its state,
# e_{t,i} = v^T tanh(W s_{t-1} + U h_i), turns the scores into weights a_{t,i} = softmax_i(e_{t,i}), and reads the
# context c_t = sum_i a_{t,i} h_i (Bahdanau, Cho & Bengio 2015). Nobody tells it where the year is: the weights
# learn to point there, and the heatmaps at the end show it.

# %%
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.datasets import DateDataset, batches
from tinyattn.lesson import options, plot_path, progress, quick_note, report

args = options(__doc__)                 # also seeds tinyattn's generator: --seed N
data = DateDataset(n=1500 if args.quick else 12000)
for i in range(4):
    print(f"{data.sources[i]!r:32} -> {data.targets[i]}")

# %% [markdown]
# ## The model
# `Seq2SeqAttention` is a bidirectional GRU encoder and a GRU decoder that attends at every step
# (tinyattn/models/seq2seq.py). Its decoder step returns the attention weights with the logits.
#
# Exercise: `lessons/exercises/additive_attention.py` has you write the scores v^T tanh(W s + U h) and their
# backward; `python -m lessons check additive_attention` grades it and trains this model on it.

# %%
config = models.Seq2SeqConfig(src_vocab=len(data.src_vocab), tgt_vocab=len(data.tgt_vocab),
                              embed_dim=24 if args.quick else 32, hidden=32 if args.quick else 64,
                              attention_dim=32 if args.quick else 64)
model = models.Seq2SeqAttention(config)
print(f"{model.num_parameters():,} parameters")

# %% [markdown]
# ## Training with teacher forcing
# The decoder sees the gold previous character and predicts the next; cross-entropy ignores padding.

# %%
epochs, batch_size = (2, 64) if args.quick else (2, 128)
optimizer = optim.Adam(model.parameters(), lr=3e-3)
rng = np.random.default_rng(args.seed)
train = data.split["train"]
losses = []
for epoch in range(epochs):
    bar = progress(batches(len(train), batch_size, rng), desc=f"epoch {epoch + 1}/{epochs}")
    for idx in bar:
        rows = train[idx]
        tgt = data.tgt[rows]
        logits, _ = model(ta.tensor(data.src[rows]), ta.tensor(tgt[:, :-1]))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ta.tensor(tgt[:, 1:].reshape(-1)),
                               ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")

# %% [markdown]
# ## Test: exact match, and does the attention line up?
# Greedy decoding on the held-out test split. For alignment, take each output character of the year, month and day
# and ask whether its strongest attention weight falls inside the source span it comes from.

# %%
model.eval()
test = data.split["test"]
predictions, weights = model.greedy_decode(ta.tensor(data.src[test]), max_len=11)
predictions, weights = predictions.numpy(), weights.numpy()
decoded = [data.tgt_vocab.decode(p) for p in predictions]
exact = float(np.mean([d == data.targets[i] for d, i in zip(decoded, test)]))

hits = total = 0
for row, i in enumerate(test):
    for position in range(10):
        role = DateDataset.target_role(position)
        if role is None:
            continue
        start, end = data.spans[i][role]
        hits += start <= weights[row, position].argmax() < end
        total += 1
alignment = hits / total
print(f"test exact match {exact:.3f}, attention alignment {alignment:.3f}" + quick_note(args))
for d, i in list(zip(decoded, test))[:5]:
    print(f"  {data.sources[i]!r:32} -> {d}  (gold {data.targets[i]})")

# %% [markdown]
# ## Where the model looked
# Rows are output characters, columns source characters. The year's digits attend to the year, the month's to the
# month name (or number), the day's to the day.

# %%
sources = [data.sources[i] for i in test[:3]]
fig = viz.attention_heatmaps([weights[row, :11, :len(source)] for row, source in enumerate(sources)],
                             [list(source) for source in sources], [list(decoded[row]) + ["<eos>"] for row in range(3)],
                             [f"{source} -> {decoded[row]}" for row, source in enumerate(sources)])
viz.save(fig, plot_path(args, "02_dates_attention.png"))
viz.save(viz.curves({"train loss": losses}, title="teacher-forced cross-entropy"),
         plot_path(args, "02_dates_loss.png"))

# %% [markdown]
# Pick an output character and see its whole row of weights. In a notebook, or stepping the lesson on a display
# (`python -m lessons 02 --step`), the slider moves the query; elsewhere `explorer.select(query=3)` redraws
# `explorer.figure`.

# %%
source, output = data.sources[test[0]], (list(decoded[0]) + ["<eos>"])[:11]   # the steps that were decoded
explorer = viz.explore_attention(weights[0, None, None, :len(output), :len(source)], list(source), output,
                                 title=f"{source} -> {decoded[0]}")

# %%
if not args.quick:
    assert exact >= 0.95, f"exact match {exact:.3f} is below the lesson's claim of 0.95"
    assert alignment >= 0.6, f"alignment {alignment:.3f} is below the lesson's claim of 0.6"
report(dates_exact_match=exact, dates_alignment=alignment, parameters=model.num_parameters())
