# %% [markdown]
# # 01 · Seq2Seq and its bottleneck, and the attention that removes it
#
# An RNN encoder-decoder squeezes the whole input into one fixed-size vector, the encoder's final state, and the
# decoder must rebuild the output from that vector alone (Cho et al. 2014; Sutskever et al. 2014). Short inputs fit;
# long ones do not. Bahdanau et al. (2015) let the decoder look back at every encoder state instead, and showed the
# quality of the plain model falling with sentence length while the attention model held up.
#
# We replay that figure on a task with a known answer: copy a random string of 4 to 20 symbols. Both models get
# about the same number of parameters and the same training steps.

# %%
from dataclasses import replace

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.datasets import SequenceTask
from tinyattn.lesson import options, plot_path, progress, quick_note, report

args = options(__doc__)                 # also seeds tinyattn's generator: --seed N
min_len, max_len = (3, 10) if args.quick else (4, 20)
train = SequenceTask("copy", n=2000 if args.quick else 12000, min_len=min_len, max_len=max_len, seed=0)
test = SequenceTask("copy", n=300 if args.quick else 1500, min_len=min_len, max_len=max_len, seed=1)
vocab = train.vocab
print("source:", vocab.decode(train.src[0], " "), "   target:", vocab.decode(train.tgt[0], " "))

# %% [markdown]
# ## Two models of about the same size
# `Seq2Seq`: the decoder sees the source only through the final encoder state c. `Seq2SeqAttention`: a
# bidirectional encoder, and at each step a context c_t re-read from all encoder states by additive attention.
# With the same GRU width the attention model has about twice the parameters (a second encoder direction, the
# attention layer, a wider decoder input), so the plain model gets wider GRUs until the two sizes match: whatever
# separates them below is not the number of parameters. The plain model's context vector is then wider too.

# %%
config = models.Seq2SeqConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), embed_dim=16,
                              hidden=32 if args.quick else 64, attention_dim=32 if args.quick else 64)
attentive = models.Seq2SeqAttention(config)
same_width = models.Seq2Seq(config).num_parameters()
plain_hidden = min(range(config.hidden, 4 * config.hidden, 4),             # the width whose size is nearest
                   key=lambda h: abs(models.Seq2Seq(replace(config, hidden=h)).num_parameters()
                                     - attentive.num_parameters()))
plain = models.Seq2Seq(replace(config, hidden=plain_hidden))
print(f"plain at the same GRU width ({config.hidden}): {same_width:,} parameters, "
      f"{attentive.num_parameters() / same_width:.1f}x fewer than the attention model")
size_ratio = plain.num_parameters() / attentive.num_parameters()
for name, model, hidden in (("plain", plain, plain_hidden), ("attention", attentive, config.hidden)):
    print(f"{name:9} GRU width {hidden:3d}: {model.num_parameters():,} parameters")
print(f"plain / attention parameters: {size_ratio:.3f}")

# %% [markdown]
# ## Training: same steps, same batches
# Each batch is trimmed to its longest sequence, so short batches cost less.

# %%
steps, batch_size = (60, 32) if args.quick else (600, 64)


def batch(task, rows):
    longest = int(task.lengths[rows].max())
    return ta.tensor(task.src[rows, :longest]), task.tgt[rows, :longest + 2]


def train_model(model, label):
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(args.seed)
    losses = []
    for _ in progress(range(steps), desc=label):
        src, tgt = batch(train, rng.integers(0, len(train.src), batch_size))
        logits, _ = model(src, ta.tensor(tgt[:, :-1]))
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), ta.tensor(tgt[:, 1:].reshape(-1)), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


curves = {name: train_model(model, name) for name, model in (("plain", plain), ("attention", attentive))}

# %% [markdown]
# ## Accuracy against input length
# Greedy decoding on held-out strings; accuracy is the share of output symbols right at their position.

# %%
def accuracy_by_length(model):
    model.eval()
    predictions, _ = model.greedy_decode(ta.tensor(test.src), max_len=max_len + 1)
    predictions = predictions.numpy()
    gold = test.tgt[:, 1:max_len + 2]
    by_length = {}
    for length in range(min_len, max_len + 1):
        rows = test.lengths == length
        if rows.any():
            correct = predictions[rows, :length] == gold[rows, :length]
            by_length[length] = float(correct.mean())
    return by_length


results = {name: accuracy_by_length(model) for name, model in (("plain", plain), ("attention", attentive))}
longest = [length for length in results["plain"] if length > max_len - 4]       # the longest few lengths
long_acc = {name: float(np.mean([acc[length] for length in longest])) for name, acc in results.items()}
for length in results["plain"]:
    print(f"length {length:2d}: plain {results['plain'][length]:.2f}   attention {results['attention'][length]:.2f}")
print(f"longest inputs ({longest[0]}-{longest[-1]}): plain {long_acc['plain']:.3f}, "
      f"attention {long_acc['attention']:.3f}" + quick_note(args))

# %%
figure = viz.curves({name: (list(acc), list(acc.values())) for name, acc in results.items()},
                    xlabel="input length", ylabel="symbol accuracy",
                    title="copying: symbol accuracy against input length")
viz.save(figure, plot_path(args, "01_accuracy_vs_length.png"))
viz.save(viz.curves(curves, ylabel="cross-entropy (nats)", title="training loss"), plot_path(args, "01_loss.png"))
_, weights = attentive.greedy_decode(ta.tensor(test.src[:1]), max_len=int(test.lengths[0]) + 1)
source = vocab.decode(test.src[0], " ").split()
viz.save(viz.attention_heatmap(weights.numpy()[0][:, :len(source)], source, source + ["<eos>"],
                               title="attention weights while copying one test string"),
         plot_path(args, "01_copy_attention.png"))

# %%
if not args.quick:
    assert long_acc["attention"] >= 0.9, long_acc
    assert long_acc["attention"] - long_acc["plain"] >= 0.3, long_acc
report(bottleneck_long_acc_plain=long_acc["plain"], bottleneck_long_acc_attention=long_acc["attention"],
       longest_lengths=[longest[0], longest[-1]], plain_over_attention_parameters=size_ratio)
