# %% [markdown]
# # 20 · Induction heads: how a two-layer Transformer learns to continue what it has seen
#
# Lesson 06 drew every head's attention and found one that looks at the previous character. A map alone says what a
# head looks at, not what it is for. Here we ask the questions that give the maps a meaning: which heads do what,
# measured over many sequences (head scores); what the model loses when a head is removed (ablation); and when, in
# training, a skill appears.
#
# The skill is the one Elhage et al. (2021, "A Mathematical Framework for Transformer Circuits") and Olsson et al.
# (2022, "In-context Learning and Induction Heads") found in the Transformers of two layers and more they studied:
# when the current token A appeared earlier followed by B, predict B again ([A][B] ... [A] -> [B]). It takes two
# heads in two layers. Each position carries a vector from the embedding to the output, the *residual stream*:
# every head (and MLP) reads it and adds its own output to it, so what one layer writes there, a later layer can
# read. A *previous-token head* in layer 0 writes "the token before me" into each position's residual stream, and an
# *induction head* in layer 1, whose query (the current token A) matches the keys of positions whose previous token
# was A, copies the token found there (B) to the output.
#
# The data make this the only way to win: random tokens, in which a stretch of random length is repeated once, a
# random distance later (`tinyattn.datasets.repeated_tokens`). Nothing in the first copy can be predicted; the second
# copy, from its second token on, can be, but only by looking up where the current token stood before, since no
# fixed offset leads there. No token occurs twice but in the copy (each sequence is drawn without replacement), so
# the token after an earlier occurrence is never ambiguous. The papers trained on natural text instead, where tokens
# repeat all the time and a repeated token is often followed by something else; the clean data here is what lets a
# model this small find the circuit in minutes. (With repeats by chance, the small models tried for this lesson
# spread their layer-0 attention over the last few tokens instead, matching several at once: a fuzzier circuit, with
# no clean previous-token head.)
#
# The vocabulary, 256 tokens, is four times the context, for a reason found the hard way. Drawn without replacement
# from 96 tokens, a sequence of 65 leaves only a third of them unseen by its end, so a model can lower its loss on
# the first copy by betting on the tokens not seen yet: a habit at odds with copying a seen one. On 96 tokens, 5 of
# 21 random starts tried (seeds 0-16 on the CPU, 0-3 on the GPU) stayed on the plateau for all 2000 steps, the
# induction score at 0.00 (seed 9 for 3000 steps, and at learning rates from 5e-4 to 2e-3); on 256, all 16 tried
# (seeds 0-3 and 9-16 on the CPU, 0-3 on the GPU) had left it by step 1500.
#
# The model is attention-only (`GPTConfig(mlp="none")`), the setting of Elhage et al.'s small models (Olsson et al.
# also studied models with MLPs, and found the same heads there), with rotary positions (RoPE, lesson 07): position
# enters only the queries and keys, never the residual stream, so a head's output says which token it read and
# nothing about where, and "the previous position" is the same relative offset everywhere.

# %%
import os
import time

import numpy as np

import tinyattn as ta
from tinyattn import interpret, models, optim, viz
from tinyattn.datasets import repeated_tokens
from tinyattn.datasets.repeats import FIRST, SECOND
from tinyattn.lesson import from_pretrained, options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__, [("--weights", dict(default=None, help="also score GPT-2's heads at the end: a hub "
                                                                 "name (gpt2, needs the hub extra) or a folder"))])
gpt2 = from_pretrained(args.weights, models.GPT)[0] if args.weights is not None else None     # before training
started = time.perf_counter()
vocab, length = (32, 24) if args.quick else (256, 64)       # context `length`; each sequence has one more token
min_span, max_span = (3, 8) if args.quick else (8, 32)
steps, batch_size, every = (40, 8, 20) if args.quick else (2000, 32, 100)
eval_tokens, eval_part = repeated_tokens(64 if args.quick else 512, length + 1, vocab, min_span, max_span,
                                         np.random.default_rng(args.seed + 1), distinct=True)   # held out, fixed
print("one sequence, and under each token where its first (1) and second (2) copy stand:")
width = len(str(vocab - 1))                                # the widest token, so that each mark stands under its own
print("\n\n".join(" ".join(f"{t:{width}}" for t in eval_tokens[0][start:start + 24]) + "\n" +
                  " ".join(f"{'.12'[p]:>{width}}" for p in eval_part[0][start:start + 24])
                  for start in (0, 24)) + " ...")                 # 24 tokens a line: a page's column holds them

# %% [markdown]
# ## Loss token by token
# The model sees tokens 0..T-1 and predicts tokens 1..T. A token's loss is the cross-entropy of its prediction; a
# random token costs about ln(vocab) nats (a little less late in a sequence, whose tokens cannot come again). The
# *in-context gain* is the mean loss on the first copy minus the mean loss on the second copy from its second token
# on: what seeing the first copy is worth.

# %%
def token_losses(model, tokens):
    """(B, T+1) loss of each token given the ones before it (NaN for token 0, which nothing predicts)."""
    with ta.no_grad():
        logits = model(ta.tensor(tokens[:, :-1])).numpy().astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    losses = -np.take_along_axis(log_p, tokens[:, 1:, None], -1)[..., 0]
    return np.concatenate([np.full((len(tokens), 1), np.nan), losses], axis=1)


predictable = (eval_part == SECOND) & (np.roll(eval_part, 1, axis=1) == SECOND)   # second copy after its first token


def copy_losses(model):
    """Mean loss on the first copy (but token 0), and on the predictable part of the second copy, of the held-out
    sequences."""
    losses = token_losses(model, eval_tokens)
    return float(np.nanmean(losses[eval_part == FIRST])), float(losses[predictable].mean())

# %% [markdown]
# ## Head scores
# Each score is one number per head: the attention it puts where a head of its kind would look, averaged over
# query positions (`tinyattn.interpret`, from the weights that `interpret.record` keeps of one forward).
# *Previous-token score*: the weight of each position on the position before it.
# *Induction score*: the weight of each token that occurred before on the tokens right after its earlier
# occurrences. They are measured on sequences made for them, a stretch of T/2 distinct random tokens followed by a
# copy of itself ([r, r]): every token of the second half has exactly one earlier occurrence, and its target is the
# token after it. A perfect head of its kind scores 1. (The `induction_score` exercise has you write this one:
# `python -m lessons check induction_score`.)

# %%
half = length // 2
score_tokens, _ = repeated_tokens(64, length, vocab, half, half, np.random.default_rng(args.seed + 2),
                                  distinct=True)                          # (64, T): [r, r]


def attention_weights(model, tokens):
    """A list over layers of (B, H, T, T) attention weights, recorded by tinyattn.interpret.record."""
    with ta.no_grad(), interpret.record(model, [f"blocks.{i}.attn" for i in range(len(model.blocks))]) as cache:
        model(ta.tensor(tokens))
    return list(cache.attention.values())


def scores(model, tokens=score_tokens):
    """(previous-token, induction) scores, each (layers, heads), of model on tokens ([r, r] sequences)."""
    weights = attention_weights(model, tokens)
    return interpret.previous_token_score(weights), interpret.induction_score(weights, tokens)

# %% [markdown]
# ## Training, and the phase change
# AdamW at a constant learning rate on fresh batches. Every `every` steps: the held-out loss on both copies and the
# best head's scores. Olsson et al. saw the in-context gain appear abruptly, at the moment the induction heads form;
# watch for the second copy's loss falling away from the first copy's while the induction score jumps (the scores
# are on the right-hand axis). Watch the first copy's loss too: it rises for a moment at the phase change. The new
# heads copy wherever they can, and in a first copy there is nothing to copy: the probability they put on tokens seen
# earlier is lost there, since no token of a first copy has been seen before. The same bet keeps the first copy's
# loss at the end a little above ln(vocab), what a uniform guess would cost, where a model that knew it was in a first
# copy could do a little better than that (the tokens seen already will not come).

# %%
def train(n_layer):
    ta.manual_seed(args.seed)
    config = models.GPTConfig(vocab_size=vocab, block_size=length, n_layer=n_layer, num_heads=4, d_model=64,
                              mlp="none", position="rope")
    model = models.GPT(config)
    optimizer = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)                     # the same batches for both models
    history = {"step": [], "first": [], "second": [], "previous": [], "induction": []}
    for step in (bar := progress(range(steps + 1), desc=f"{n_layer} layer{'s' * (n_layer > 1)}")):
        if step % every == 0:
            model.eval()
            first, second = copy_losses(model)
            previous, induction = scores(model)
            for key, value in zip(history, (step, first, second, previous[0].max(), induction[-1].max())):
                history[key].append(value)
            bar.set_postfix(first=f"{first:.2f}", second=f"{second:.2f}")
            model.train()
        if step == steps:
            break
        tokens, _ = repeated_tokens(batch_size, length + 1, vocab, min_span, max_span, rng, distinct=True)
        _, loss = model(ta.tensor(tokens[:, :-1]), ta.tensor(tokens[:, 1:]))
        train_step(loss, optimizer)
    model.eval()
    return model, history


model, history = train(2)
first_copy_loss, second_copy_loss = copy_losses(model)
in_context_gain = first_copy_loss - second_copy_loss
print(f"2 layers: loss on the first copy {first_copy_loss:.3f} nats (a random token: ln {vocab} = "
      f"{np.log(vocab):.3f}), on the second {second_copy_loss:.3f}: in-context gain {in_context_gain:.3f} nats"
      + quick_note(args))
jump = int(np.argmax(np.diff(history["induction"])))
print(f"the induction score rose most between steps {history['step'][jump]} and {history['step'][jump + 1]} "
      f"({history['induction'][jump]:.2f} -> {history['induction'][jump + 1]:.2f})")
bump = int(np.argmax(history["first"][1:])) + 1                       # after step 0's untrained guess
print(f"the first copy's loss was highest after the start at step {history['step'][bump]} "
      f"({history['first'][bump]:.3f} nats; {history['first'][-1]:.3f} at the end)")
COLOURS = {"first copy": "C0", "second copy": "C1", "best induction score, layer 1": "C2",
           "best previous-token score, layer 0": "C4", "2 layers, first copy": "C0", "2 layers, second copy": "C1",
           "1 layer, second copy": "C3"}           # one quantity, one colour, in every figure
viz.save(viz.curves({"first copy": (history["step"], history["first"]),
                     "second copy": (history["step"], history["second"])},
                    secondary={"best induction score, layer 1": (history["step"], history["induction"]),
                               "best previous-token score, layer 0": (history["step"], history["previous"])},
                    ylabel="held-out loss (nats)", ylabel2="head score", colors=COLOURS,
                    title="2-layer attention-only model: the phase change",
                    hlines={f"ln {vocab}: a random token": np.log(vocab)}),
         plot_path(args, "20_phase_change.png"))

# %% [markdown]
# ## Loss by position in the copy
# The k-th token of the first copy against the k-th of the second. The second copy's first token is as unpredictable
# as any (nothing tells where the repeat starts); from the second on, the model has found its place.

# %%
losses = token_losses(model, eval_tokens)
offset = {part: np.arange(length + 1) - np.argmax(eval_part == part, axis=1)[:, None] for part in (FIRST, SECOND)}
by_position = {name: [float(np.nanmean(losses[(eval_part == part) & (offset[part] == k)])) for k in range(max_span)]
               for name, part in (("first copy", FIRST), ("second copy", SECOND))}
print("mean loss of the k-th token of each copy, k = 0..:\n" +
      "\n".join(f"  {name:12} " + " ".join(f"{v:.2f}" for v in values) for name, values in by_position.items()))
viz.save(viz.curves({name: (np.arange(max_span), values) for name, values in by_position.items()},
                    xlabel="position in the copy", ylabel="loss (nats)", title="loss by position in the copy",
                    colors=COLOURS),
         plot_path(args, "20_loss_by_position.png"))

# %% [markdown]
# ## Which head does what
# The scores of every head of the trained model, as (layer x head) heat maps. In the runs tried on 256 tokens,
# layer 1 mostly grew three induction heads, not one, each scoring near 0.98 (one run, seed 15 on the CPU, grew four
# weaker ones, near 0.5). Layer 0 gave the previous-token role to one head (0.67 to 0.84) in most runs, or shared it
# between two (0.53 and 0.77, seed 1 on the CPU); its other heads mostly look at their own position. So the run also
# prints the weight that layer 0's heads together put on the previous token, the sum of their scores, and asserts
# that it is at least 0.6: it was 0.77 to 1.45 in the runs tried. (A head that spread its weight evenly over the
# tokens before it would score about 0.06 here; four such heads, 0.24.)
#
# Where several heads tie, the sections below follow one of them as "the" induction head (or previous-token head):
# the lowest-numbered of the heads that score within 0.05 of the best. Taking the best score itself would leave the
# choice to the last digits of 0.98 against 0.98, which change from one machine to another, and with it every number
# printed about "the" head.

# %%
TIE = 0.05                                            # heads this close to the best score count as tied


def tied_with_best(head_scores):
    """The heads of one layer's scores within TIE of the best, lowest-numbered first (the one the lesson follows)."""
    return [int(head) for head in np.flatnonzero(head_scores >= head_scores.max() - TIE)]


previous, induction = scores(model)
prev_head, ind_tied = tied_with_best(previous[0])[0], tied_with_best(induction[1])
ind_head = ind_tied[0]
print("previous-token score (layers x heads):\n" + np.array2string(previous, precision=2, suppress_small=True))
print("induction score (layers x heads):\n" + np.array2string(induction, precision=2, suppress_small=True))
print(f"previous-token head followed: layer 0 head {prev_head} ({previous[0, prev_head]:.2f}); induction head "
      f"followed: layer 1 head {ind_head} ({induction[1, ind_head]:.2f}), of the heads within {TIE} of the best: "
      + ", ".join(f"{h} ({induction[1, h]:.2f})" for h in ind_tied))
layer0_previous = float(previous[0].sum())
print(f"weight on the previous token summed over layer 0's heads: {layer0_previous:.2f}")
fig, axes = viz.plt.subplots(1, 2, figsize=(9, 2.6), layout="constrained")
viz.head_score_map(previous, title="previous-token score", ax=axes[0])
viz.head_score_map(induction, title="induction score", ax=axes[1])
viz.save(fig, plot_path(args, "20_head_scores.png"))

# %% [markdown]
# ## Your own induction score
# The score of every head again, computed by the `induction_score` exercise (lessons/exercises/induction_score.py)
# once no TODO is left in it; until then by the bundled solution (or, in a student copy without solutions, the
# library's). The line below says which ran. Both see the same recorded weights, so they must agree to rounding.

# %%
from lessons.checking.learners_file import learners_or_bundled  # the repository root is on the path (tinyattn.lesson)

own_induction_score, which = learners_or_bundled("induction_score", "induction_score",
                                                 fallback=interpret.induction_score)
print(f"the exercise's induction score: {which}")
own = own_induction_score([w.numpy() for w in attention_weights(model, score_tokens)], score_tokens)
own_score_err = float(np.abs(np.asarray(own) - induction).max())
print(f"largest difference from tinyattn.interpret.induction_score: {own_score_err:.1e}")
assert own_score_err < 1e-6, ("the exercise's induction score differs from the library's: python -m lessons check "
                              "induction_score says where")

# %% [markdown]
# ## The stripe
# The two heads on one [r, r] sequence. The previous-token head is a line just below the diagonal. The induction
# head, in the second half, is a line parallel to the diagonal, half a sequence to the left and one to the right: each
# token of the second copy attends to the token *after* its first occurrence, the one it is about to predict.

# %%
shown = min(half, 12)                                      # a short [r, r], so its tokens can be read
picture, _ = repeated_tokens(1, 2 * shown, vocab, shown, shown, np.random.default_rng(args.seed + 3), distinct=True)
weights = attention_weights(model, picture)
fig, axes = viz.plt.subplots(1, 2, figsize=(13, 5.5), layout="constrained")
viz.head_pattern(weights[0].numpy()[0, prev_head], picture[0], ax=axes[0],
                 title=f"layer 0 head {prev_head}: previous token")
viz.head_pattern(weights[1].numpy()[0, ind_head], picture[0], ax=axes[1], title=f"layer 1 head {ind_head}: induction")
viz.save(fig, plot_path(args, "20_induction_stripe.png"))

# %% [markdown]
# The same sequence with every head: hover a token on the left to keep its row, or pick "all" to see each head in
# its colour (one HTML file, no server and no network needed).

# %%
viz.save(viz.attention_html([w.numpy() for w in weights], [str(t) for t in picture[0]], layer=1, head=ind_head),
         plot_path(args, "20_attention_view.html"))

# %% [markdown]
# ## Ablation: remove a head, measure what is lost
# Replace one head's output by its mean over the batch and positions (mean ablation: the head keeps its average
# contribution but no longer tells one token from another) and measure the in-context gain again, one head at a
# time. The mean comes from a run recorded first (`mean_from`): taken inside the ablated forward, it would carry
# later tokens into earlier positions, and the model would no longer be causal. Pooling the mean over positions is
# safe here because with RoPE a head's output carries no position (position enters only its queries and keys), so
# every position's output is drawn from one distribution; in GPT-2, whose learned positions are added to the residual
# stream, a head's output depends on where it stands (the first position most of all), and a mean pooled over
# positions would put at each position an output it never gives there: a per-position mean is the fairer
# replacement. A head the lookup depends on takes much of the gain with it; a head outside the circuit, little.
# Where heads share a role (two previous-token heads, or the three induction heads most runs grow), removing one
# leaves the others to do part of the work, and each alone takes less: about half of the gain in the runs tried. So the
# induction heads are also ablated together, every layer-1 head scoring 0.5 or more; together they should take
# nearly all of it. A layer-0 head with no previous-token score may matter too: the line after the chart gives each
# layer-0 head's mean weight on its own position. A head that mostly looks at itself adds a transformed copy of the
# current token to the residual stream, which layer 1 may read instead of the token itself; the next section asks,
# with activation patching, whether such a head carries the lookup or only something the rest has come to rely on.

# %%
with ta.no_grad(), interpret.record(model, [f"blocks.{i}.attn" for i in range(2)]) as unablated:
    model(ta.tensor(eval_tokens[:, :-1]))                       # the run whose head means replace the heads
gain_removed = {}
for layer in range(2):
    for head in range(4):
        with interpret.ablate_heads(model, {f"blocks.{layer}.attn": [head]}, how="mean", mean_from=unablated):
            first, second = copy_losses(model)
        gain_removed[f"L{layer}H{head}"] = 1 - (first - second) / in_context_gain
print("fraction of the in-context gain lost when one head is mean-ablated:\n  " +
      "  ".join(f"{name} {value:.2f}" for name, value in gain_removed.items()))
ablation_gain_removed = gain_removed[f"L1H{ind_head}"]
prev_ablation_gain_removed = gain_removed[f"L0H{prev_head}"]
print(f"ablating the induction head removes {ablation_gain_removed:.0%} of the gain, the strongest previous-token "
      f"head {prev_ablation_gain_removed:.0%}")
induction_heads = [head for head in range(4) if induction[1, head] >= 0.5] or [ind_head]
with interpret.ablate_heads(model, {"blocks.1.attn": induction_heads}, how="mean", mean_from=unablated):
    first, second = copy_losses(model)
induction_heads_gain_removed = 1 - (first - second) / in_context_gain
print(f"ablating layer 1's induction heads together (heads {', '.join(map(str, induction_heads))}) removes "
      f"{induction_heads_gain_removed:.0%} of the gain")
viz.save(viz.bars(gain_removed, ylabel="fraction of the gain lost", fmt="{:.2f}",
                  title="in-context gain lost by ablating one head (L = layer, H = head)"),
         plot_path(args, "20_ablation.png"))
own_position = np.diagonal(attention_weights(model, score_tokens)[0].numpy(), axis1=2, axis2=3).mean(axis=(0, 2))
print("mean weight of each layer-0 head on its own position: " + " ".join(f"{w:.2f}" for w in own_position))

# %% [markdown]
# ## Patching: which heads carry the lookup
# Ablation asks what the model loses without a head. It cannot tell a head that carries the lookup from one whose
# steady output the rest of the model has come to rely on (a constant offset in the residual stream that layer 1's
# queries and keys were trained with): taking either away costs. Activation patching asks the other way round
# (`interpret.patching_sweep`). Run the model on a *corrupted* input, the same [r, r] sequences with the first copy
# replaced by other random tokens, so that nothing in the second copy can be looked up; then put back one head's
# output from the *clean* run, every layer and head in turn, and measure how much of the clean run's performance
# comes back. The measure: the mean logit of the correct next token over the second copy (from its second token on),
# scaled so that the corrupted run is 0 and the clean run 1.
#
# What to look for (the run prints its own numbers; those quoted here are the default run's, seed 0, and a quick
# run, too small to learn, shows none of it). Only the induction
# heads bring anything back: the lookup happens there, and nowhere else carries it. Each alone brings back little
# (0.06 to 0.08); patched together (the line after the map) they bring back all of it (1.00): the three share the
# lookup, and here the whole is far more than the sum of its parts. The previous-token head, patched alone, brings back nothing: its clean output tells layer 1 where each
# token of the *clean* first copy stood, but the tokens standing there now are the corrupted ones. The heads "outside
# the circuit" whose ablation still cost much (in the default run, two layer-0 heads that attend to their own
# position: 0.72 and 0.52 of the gain) bring back nothing either: what they write does not differ between the two
# runs. Each re-encodes the current token, which both runs share, and layer 1 reads it from them; mean ablation takes
# that away, and so costs, but the information the lookup needs does not pass through them.

# %%
patch_rng = np.random.default_rng(args.seed + 4)
clean_tokens = score_tokens[:16]
corrupted_tokens = clean_tokens.copy()
for row in corrupted_tokens:                       # a first copy of tokens the second copy does not hold
    row[:half] = patch_rng.choice(np.setdiff1d(np.arange(vocab), row[half:]), half, replace=False)


def copy_logit(logits, tokens=clean_tokens):
    """The mean logit of the correct next token over the second copy, from its second token on."""
    logits = logits.numpy()[:, half:-1].astype(np.float64)
    return float(np.take_along_axis(logits, tokens[:, half + 1:, None], -1).mean())


with ta.no_grad():
    clean_metric = copy_logit(model(ta.tensor(clean_tokens)))
    corrupted_metric = copy_logit(model(ta.tensor(corrupted_tokens)))
patched = interpret.patching_sweep(model, ta.tensor(clean_tokens), ta.tensor(corrupted_tokens), copy_logit)
recovered = (patched - corrupted_metric) / (clean_metric - corrupted_metric)
print(f"logit of the correct token over the second copy: clean {clean_metric:.2f}, corrupted {corrupted_metric:.2f}")
print("fraction recovered by patching one head from the clean run (layers x heads):\n"
      + np.array2string(recovered, precision=2, suppress_small=True))
print("each head: gain lost when ablated / performance recovered when patched:\n  " + "  ".join(
    f"L{l}H{h} {gain_removed[f'L{l}H{h}']:.2f}/{recovered[l, h]:.2f}" for l in range(2) for h in range(4)))
viz.save(viz.patching_map(recovered, title="patching one head from the clean run: fraction recovered",
                          label="fraction recovered"), plot_path(args, "20_patching.png"))
with ta.no_grad(), interpret.record(model, ["blocks.1.attn"]) as clean_run:
    model(ta.tensor(clean_tokens))
with ta.no_grad(), interpret.patch_heads(model, {"blocks.1.attn": induction_heads}, source=clean_run):
    together = copy_logit(model(ta.tensor(corrupted_tokens)))
induction_heads_patched = (together - corrupted_metric) / (clean_metric - corrupted_metric)
print(f"patching the induction heads together (layer 1 heads {', '.join(map(str, induction_heads))}) brings back "
      f"{induction_heads_patched:.2f}")

# %% [markdown]
# ## The circuit in the weights
# Scores, ablation and patching watch the model run. Elhage et al. read the same circuit from the weights alone
# (`interpret.head_weights`, and the circuits in `tinyattn/interpret/circuits.py`). A head reads the residual stream
# x through W_Q, W_K, W_V and writes through W_O. Its *QK circuit* W_Q W_K^T says which residual at a key position a
# query's residual looks for; its *OV circuit* W_V W_O, what it writes when it attends somewhere.
#
# *K-composition* is how much of what an earlier head writes a later head's keys read: the Frobenius norm of
# W_OV(earlier) W_QK(later)^T over the product of the two norms, 1 when the keys read exactly what was written, 0
# when they read none of it. The induction head's keys should read what a previous-token head writes.
#
# *Copying*: through the embedding and the unembedding, a head's OV circuit becomes a (vocab x vocab) matrix
# W_E W_V W_O W_U, row a: how attending to token a moves every output logit. A head that copies raises the logit of
# the token it attends to; the matrix's eigenvalues are then mostly positive. Elhage et al.'s copying score is the
# sum of the eigenvalues over the sum of their absolute values: 1 for a pure copier, -1 for a head that suppresses
# what it reads, near 0 for one that maps tokens elsewhere.
#
# Expect every layer-0 head to score near -1, whatever its pattern. Each reads its own token or the one before it,
# and on these data neither can come next: a sequence holds each token once, and in the second copy the token after
# the current one is the one that followed it before, never the current token or its predecessor. So all that a
# layer-0 head can usefully write straight into the logits about the token it reads is "not this one": its direct
# path learns to suppress what it reads. What layer 1 reads from these heads (the previous token, by K-composition)
# travels in other directions of the residual stream, which the copying score, a map from token to logits, does not
# see.

# %%
k_composition = interpret.composition_scores(model, "K")[0, :, 1, ind_head]      # layer-0 heads -> induction head
k_partner = int(k_composition.argmax())
k_composition_max = float(k_composition[k_partner])
k_composition_partner_is_prev_token = bool(previous[0, k_partner] >= 0.5 * previous[0].max())
print("K-composition of each layer-0 head into the induction head (layer 1 head "
      f"{ind_head}): " + " ".join(f"{v:.2f}" for v in k_composition))
print(f"the largest is layer 0 head {k_partner} ({k_composition_max:.2f}), whose previous-token score is "
      f"{previous[0, k_partner]:.2f} (the best layer-0 head's: {previous[0].max():.2f})")
copying = np.array([[interpret.copying_score(interpret.ov_circuit(model, layer, head)) for head in range(4)]
                    for layer in range(2)])
print("copying score of every head's OV circuit (layers x heads):\n"
      + np.array2string(copying, precision=2, suppress_small=True))
copying_score_induction = float(copying[1, ind_head])
others = [(layer, head) for layer in range(2) for head in range(4)
          if not (layer == 1 and head in induction_heads)]                 # every head not an induction head
copying_score_others_max = float(max(copying[layer, head] for layer, head in others))
print("each induction head's induction score and copying score: " + ", ".join(
    f"L1H{h} {induction[1, h]:.2f} and {copying[1, h]:.2f}" for h in induction_heads))
print(f"the followed induction head's (L1H{ind_head}) copying score {copying_score_induction:.2f}; the highest of the "
      f"heads that are not induction heads: {copying_score_others_max:.2f}")

# %% [markdown]
# ## What each head writes into the logits
# In this attention-only model the residual stream that reaches the final LayerNorm is a sum: the token's embedding
# (no position: RoPE adds none), and per layer each head's output through its slice of W_O, plus the output
# projection's bias (`interpret.decompose_residual`; the parts add up to the residual to rounding, printed). With the
# final LayerNorm's scale held at its value in the run, the norm is linear, so each part's share of a logit adds up
# too: *direct logit attribution* (`interpret.direct_logit_attribution`). On the [r, r] sequences, at the position
# just before the end, the logit of the token about to repeat: which parts raise it? The *logit lens*
# (`interpret.logit_lens`) asks the same of the whole residual stream after each layer: how likely the correct
# token would be if the model stopped there.

# %%
dla_tokens = ta.tensor(score_tokens)
decomposition = interpret.decompose_residual(model, dla_tokens)
residual_decomposition_error = decomposition.error()
print(f"the parts ({', '.join(decomposition.labels[:3])}, ...) add up to the final residual: max |error| / max "
      f"|residual| = {residual_decomposition_error:.1e}")
dla, parts = interpret.direct_logit_attribution(model, dla_tokens, score_tokens[:, -1], position=-2)
dla = dla.mean(axis=1)                                                  # over the 64 sequences
print("direct logit attribution to the repeated token (mean over sequences):\n  "
      + "  ".join(f"{name} {value:.2f}" for name, value in zip(parts, dla)))
head_parts = [i for i, name in enumerate(parts) if "H" in name]
dla_top_head = parts[max(head_parts, key=lambda i: dla[i])]
print(f"the head that raises it most: {dla_top_head}")
viz.save(viz.bars(dict(zip(parts, dla)), ylabel="logit (mean over sequences)", fmt="{:.1f}",
                  title="direct logit attribution to the repeated token"), plot_path(args, "20_dla.png"))
lens = interpret.logit_lens(model, dla_tokens)[:, :, half:-1].astype(np.float64)     # second copy
lens -= lens.max(-1, keepdims=True)
lens_p = np.exp(lens) / np.exp(lens).sum(-1, keepdims=True)
correct = np.take_along_axis(lens_p, np.broadcast_to(score_tokens[None, :, half + 1:, None], lens_p.shape[:-1] + (1,)),
                             -1)[..., 0].mean(axis=(1, 2))
print("logit lens, probability of the correct token over the second copy after the embedding, layer 0, layer 1: "
      + " ".join(f"{p:.2f}" for p in correct))

# %% [markdown]
# ## Why two layers: a one-layer control
# A head's query and key see only what is at their own positions. In one layer that is a token and its position:
# a query A can find the earlier A, but nothing at that position says what came *after* it, and the token after it
# (B) knows nothing of A. So one layer can at best favour tokens seen earlier in the context (each earlier token is
# a candidate), never tell which one comes next. The previous-token head of layer 0 (or heads, where several share
# the role) is what makes the lookup possible: it writes "my previous token was A" into B's position, which layer 1's
# query A then matches (Elhage et al. call this K-composition). The same training on one layer (whether it gains
# anything at all is printed):

# %%
one_layer, one_history = train(1)
one_first, one_layer_second_copy_loss = copy_losses(one_layer)
print(f"1 layer: loss on the first copy {one_first:.3f}, on the second {one_layer_second_copy_loss:.3f}: in-context "
      f"gain {one_first - one_layer_second_copy_loss:.3f} nats (2 layers: {in_context_gain:.3f})")
viz.save(viz.curves({"2 layers, second copy": (history["step"], history["second"]),
                     "1 layer, second copy": (one_history["step"], one_history["second"]),
                     "2 layers, first copy": (history["step"], history["first"])},
                    ylabel="held-out loss (nats)", title="one layer cannot do it",
                    hlines={f"ln {vocab}": np.log(vocab)}, colors=COLOURS),
         plot_path(args, "20_one_layer.png"))

# %% [markdown]
# ## GPT-2 has them too
# Olsson et al. found induction heads in every Transformer of two layers or more they looked at, trained on ordinary
# text. With `--weights gpt2` (after `pip install -e ".[hub]"`), the same two scores for GPT-2 small's 144 heads
# (12 layers x 12), on [r, r] sequences of its own 50,257 tokens. Look for previous-token heads in the early layers
# and induction heads a few layers above them: the same circuit, found by training on web text.

# %%
gpt2_previous = gpt2_induction = None
if gpt2 is None:
    print("GPT-2 not loaded. To score its heads: pip install -e \".[hub]\" && python -m lessons 20 --weights gpt2")
else:
    gpt2_half = min(50, gpt2.config.block_size // 2)
    gpt2_tokens, _ = repeated_tokens(8, 2 * gpt2_half, gpt2.config.vocab_size, gpt2_half, gpt2_half,
                                     np.random.default_rng(args.seed + 3), distinct=True)
    gpt2_previous, gpt2_induction = scores(gpt2, gpt2_tokens)
    for name, table in (("previous-token", gpt2_previous), ("induction", gpt2_induction)):
        best = np.argsort(table, axis=None)[::-1][:3]
        print(f"GPT-2's strongest {name} heads: " + ", ".join(
            f"layer {i // table.shape[1]} head {i % table.shape[1]} ({table.flat[i]:.2f})" for i in best))
    fig, axes = viz.plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    gpt2_name = os.path.basename(os.path.normpath(args.weights))      # the folder's or the hub name's model
    viz.head_score_map(gpt2_previous, title=f"{gpt2_name}: previous-token score", ax=axes[0])
    viz.head_score_map(gpt2_induction, title=f"{gpt2_name}: induction score", ax=axes[1])
    viz.save(fig, plot_path(args, "20_gpt2_head_scores.png"))

# %%
seconds = time.perf_counter() - started
print(f"the whole run took {seconds:.0f} s on {ta.get_num_threads()} threads (load average {os.getloadavg()[0]:.2f})")
if not args.quick:
    assert induction[1].max() >= 0.5 and layer0_previous >= 0.6, (induction, previous)
    assert in_context_gain >= 1.0, in_context_gain
    assert induction_heads_gain_removed >= 0.9, (induction_heads, induction_heads_gain_removed, gain_removed)
    assert one_layer_second_copy_loss >= second_copy_loss + 1.0, (one_layer_second_copy_loss, second_copy_loss)
    assert induction_heads_patched >= 0.9, (induction_heads, induction_heads_patched, recovered)
    assert k_composition_partner_is_prev_token, (k_composition, previous)
    assert copying_score_induction > copying_score_others_max, copying
    assert dla_top_head.startswith("L1H") and induction[1, int(dla_top_head[3:])] >= 0.5, (parts, dla, induction)
    if seconds > 240:
        print(f"warning: the run took {seconds:.0f} s, above the 240 s this lesson expects on 2 cores; timings "
              "depend on what else runs on the machine")
assert residual_decomposition_error <= 1e-6, residual_decomposition_error      # float32: rounding, any run
report(induction_score_max=float(induction[1].max()), prev_token_score_max=float(previous[0].max()),
       prev_token_score_layer0_sum=layer0_previous,
       in_context_gain_nats=in_context_gain, ablation_gain_removed=ablation_gain_removed,
       induction_heads_ablation_gain_removed=induction_heads_gain_removed,
       prev_token_ablation_gain_removed=prev_ablation_gain_removed, second_copy_loss=second_copy_loss,
       one_layer_second_copy_loss=one_layer_second_copy_loss, k_composition_max=k_composition_max,
       k_composition_partner_is_prev_token=k_composition_partner_is_prev_token,
       copying_score_induction=copying_score_induction, copying_score_others_max=copying_score_others_max,
       residual_decomposition_error=residual_decomposition_error, dla_top_head=dla_top_head, run_seconds=seconds,
       **({} if gpt2 is None else {"gpt2_prev_token_score_max": float(gpt2_previous.max()),
                                   "gpt2_induction_score_max": float(gpt2_induction.max())}))
