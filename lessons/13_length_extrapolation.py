# %% [markdown]
# # 13 · Longer than in training: how position schemes extrapolate
#
# A language model trained on windows of T characters is asked to read 2T. What happens at positions it never saw
# depends on how it was told where tokens sit (Vaswani et al. 2017 compare the first two: section 3.5, Table 3 row E):
# - **learned** (GPT-2): a trained vector per position. Positions T..2T-1 have vectors that no gradient ever reached
#   (their random initialisation, shrunk by weight decay).
# - **sinusoidal** (Vaswani et al. 2017): a fixed table defined for every position. The paper hoped it would "allow
#   the model to extrapolate to sequence lengths longer than the ones encountered during training"; the vectors past T
#   exist, but the layers never saw them.
# - **RoPE** (Su et al. 2021): rotate queries and keys by angles proportional to the position; the score q_m . k_n
#   then depends on the positions only through m - n (shown below, for both ways of pairing channels). Past T the
#   model meets offsets larger than any in training, but each offset it knows looks the same wherever it occurs.
# - **none**: nothing added. A causal model can still tell positions apart (token t attends to t + 1 tokens, and
#   can count them; Haviv et al. 2022), at some cost in accuracy.
#
# Four character GPTs (lesson 06) train on windows of 64 characters with the same steps and batches, and are then
# measured on windows of 128.

# %%
import time

import numpy as np

import tinyattn as ta
from tinyattn import models, nn, optim, viz
from tinyattn.datasets import CharCorpus, bigram_bits_per_char
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__)
corpus = CharCorpus(max_chars=60_000 if args.quick else None)
bigram_bpc = bigram_bits_per_char(corpus.train, corpus.val, len(corpus.vocab))
train_len = 32 if args.quick else 64
steps, batch_size = (30, 8) if args.quick else (600, 16)
schemes = ["learned", "sinusoidal", "rope", "none"]
print(f"{len(corpus.train):,} training characters; train on {train_len}, test on {2 * train_len}; "
      f"bigram model {bigram_bpc:.3f} bits/char")

# %% [markdown]
# ## RoPE's two ways of pairing channels
# RoPE turns pairs of a query's (and key's) channels, pair i by the angle m theta_i at position m, theta_i =
# 10000^(-2i/D). Which channels make a pair is a convention. The RoPE paper (its R_Theta, section 3.2.2) and Meta's
# original LLaMA code pair neighbours, (2i, 2i + 1), as the real and imaginary parts of a complex number. GPT-NeoX
# and Hugging Face's port of LLaMA pair channel i with i + D/2 and compute the turn with `rotate_half`; so does
# `nn.RotaryEmbedding` by default (`interleaved=True` pairs neighbours; `GPTConfig(rope_interleaved=True)`). With the
# channels listed in the other order the two are the same rotation, which is why Hugging Face's conversion of Meta's
# checkpoints only reorders the rows of W_q and W_k.
# Both below on one query and one key placed at every position of a window of 128: the reordering, and the scores,
# which stay the same along every diagonal m - n = const. (The same query and key score differently under the two
# pairings: weights trained with one run with the other only once reordered.)

# %%
head_dim, window = 8, 128
query, key = np.random.default_rng(args.seed).standard_normal((2, head_dim))
theta = 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
angles = np.arange(window)[:, None] * theta                                    # (positions, pairs)


def rope_interleaved(x):
    """x (positions, D) turned as the paper and Meta's LLaMA do: pair i is the channels (2i, 2i + 1)."""
    a, b = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2], out[:, 1::2] = a * np.cos(angles) - b * np.sin(angles), b * np.cos(angles) + a * np.sin(angles)
    return out


def rope_half(x):
    """x (positions, D) turned as nn.RotaryEmbedding does: pair i is the channels (i, i + D/2)."""
    return nn.RotaryEmbedding(head_dim, max_len=window)(ta.tensor(x)).numpy()


halves = np.r_[0:head_dim:2, 1:head_dim:2]               # channel order (0, 2, 4, ..., 1, 3, 5, ...): pairs to halves
at_every = lambda v: np.tile(v, (window, 1))
package_err = float(np.abs(rope_interleaved(at_every(query)) - nn.RotaryEmbedding(
    head_dim, max_len=window, interleaved=True)(ta.tensor(at_every(query))).numpy()).max())
print(f"interleaved pairs by hand vs nn.RotaryEmbedding(interleaved=True): max |difference| = {package_err:.1e}")
assert package_err < 1e-12
reorder_err = float(np.abs(rope_half(at_every(query)[:, halves]) - rope_interleaved(at_every(query))[:, halves]).max())
print(f"rotate_half on the reordered channels vs interleaved pairs: max |difference| = {reorder_err:.1e}")
for name, rope in (("interleaved (2i, 2i + 1)", rope_interleaved), ("rotate_half (i, i + D/2)", rope_half)):
    scores = rope(at_every(query)) @ rope(at_every(key)).T                     # [m, n]: query at m, key at n
    spread = max(np.ptp(np.diagonal(scores, offset)) for offset in range(-window + 1, window))
    print(f"{name}: q_m . k_n along each diagonal m - n = const varies by at most {spread:.1e} "
          f"(m - n = 3: {scores[3, 0]:+.4f} at m = 3, {scores[120, 117]:+.4f} at m = 120)")
    assert spread < 1e-12
assert reorder_err < 1e-12

# %% [markdown]
# ## Training at length T
# block_size is 2T for every model, so that each can be run on 2T; only the first T positions ever train.

# %%
def train_lm(position):
    ta.manual_seed(args.seed)
    config = models.GPTConfig(vocab_size=len(corpus.vocab), block_size=2 * train_len, n_layer=2, num_heads=4,
                              d_model=64 if args.quick else 128, position=position)
    model = models.GPT(config)
    optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(steps // 10, steps, 0.1))
    rng = np.random.default_rng(args.seed)                                  # the same batches for every scheme
    start = time.perf_counter()
    for _ in progress(range(steps), desc=position):
        x, y = corpus.batch("train", batch_size, train_len, rng)
        _, loss = model(ta.tensor(x), ta.tensor(y))
        train_step(loss, optimizer, schedule, clip_parameters=model.parameters())
    return model, time.perf_counter() - start


models_by_scheme, seconds = {}, {}
for position in schemes:
    models_by_scheme[position], seconds[position] = train_lm(position)

# %% [markdown]
# ## Bits per character at every position of a 2T window
# A causal model's prediction at position t reads only tokens 0..t, so on a window of 2T the first T predictions are
# exactly those of a window of T: one pass gives the score at the training length (positions below T) and at twice
# it (all 2T positions), over the same held-out windows for every scheme.

# %%
def bits_per_position(model, windows=8 if args.quick else 256):
    model.eval()
    rng = np.random.default_rng(args.seed + 1)
    out = []
    with ta.no_grad():
        for _ in range(windows // 8):
            x, y = corpus.batch("val", 8, 2 * train_len, rng)
            log_probs = ta.log_softmax(model(ta.tensor(x)), dim=-1).numpy()
            out.append(-np.take_along_axis(log_probs, y[..., None], axis=-1)[..., 0] / np.log(2))
    return np.concatenate(out).mean(0)                                        # (2T,) bits at each position


per_position = {p: bits_per_position(m) for p, m in models_by_scheme.items()}
bpc = {p: [float(b[:train_len].mean()), float(b.mean())] for p, b in per_position.items()}
print(f"{'scheme':11} {'at T':>6} {'at 2T':>6} {'past T only':>12} {'train s':>8}" + quick_note(args))
for p in schemes:
    print(f"{p:11} {bpc[p][0]:6.3f} {bpc[p][1]:6.3f} {per_position[p][train_len:].mean():12.3f} {seconds[p]:8.1f}")
smooth = lambda b: np.convolve(b, np.ones(8) / 8, mode="valid")
viz.save(viz.curves({p: (np.arange(len(smooth(b))) + 4, smooth(b)) for p, b in per_position.items()},
                    xlabel=f"position in the window (training saw 0 to {train_len - 1})",
                    ylabel="bits per character", title=f"held-out bits/char by position, trained on T={train_len}",
                    hlines={"bigram model": bigram_bpc}),
         plot_path(args, "13_bits_by_position.png"))
viz.save(viz.bars({p: bpc[p] for p in schemes}, group_labels=[f"T={train_len}", f"2T={2 * train_len}"],
                  ylabel="bits per character", title="held-out bits/char at the training length and at twice it",
                  hlines={"bigram model": bigram_bpc}), plot_path(args, "13_extrapolation.png"))

# %% [markdown]
# Read the table with the figure: where a curve turns up at T, the scheme stops working past its training length.
# The absolute schemes (learned, sinusoidal) hand the layers position vectors they never saw; RoPE and no positions
# hand them only longer distances between tokens. Fixes used in practice keep the distances seen in training
# (ALiBi's linear bias, sliding windows) or rescale RoPE's angles (position interpolation), and most models are simply
# trained or fine-tuned on the length they will read.

# %%
rise = {p: bpc[p][1] - bpc[p][0] for p in schemes}
print("rise from T to 2T, bits/char: " + ", ".join(f"{p} {r:+.3f}" for p, r in rise.items()))
for p in schemes:                       # past T, where the smoothed curve first climbs 0.3 bits above its mean below T
    curve = smooth(per_position[p])[train_len - 4:]                      # entry i: the mean of positions T + i - 4 ..
    above = np.nonzero(curve > per_position[p][:train_len].mean() + 0.3)[0]
    print(f"{p:11} " + (f"turns up at position {train_len + above[0]}" if len(above)
                        else "stays within 0.3 bits of its mean below T"))
if not args.quick:
    for p in schemes:
        assert bpc[p][0] < bigram_bpc, (p, bpc[p], bigram_bpc)              # every model learned something
    assert rise["learned"] > 0.5 and rise["sinusoidal"] > 0.5, rise
    assert rise["rope"] < min(rise["learned"], rise["sinusoidal"]), rise
report(lm_extrapolation_bpc={p: [round(v, 4) for v in b] for p, b in bpc.items()}, lm_bigram_bpc=bigram_bpc,
       train_length=train_len)
