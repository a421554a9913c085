# %% [markdown]
# # 06 · GPT: a character language model, and the KV cache
#
# A decoder-only Transformer predicts each next character from the ones before it: causal self-attention and
# learned position embeddings, as in GPT-1 (Radford et al. 2018), whose blocks were post-norm like the original
# Transformer's (LayerNorm after each residual add); GPT-2 (Radford et al. 2019) moved the LayerNorm to the input of
# each sub-block and added one after the last block, the pre-norm form used here. It trains here on the source code of
# Python's own standard library, which every Python installation ships. We compare it with a count-based bigram
# model in bits per character, sample from it, and time generation with and without a KV cache.

# %%
import math
import time

import numpy as np

import tinyattn as ta
from tinyattn import interpret, models, optim, viz
from tinyattn.datasets import CharCorpus, bigram_bits_per_char
from tinyattn.lesson import expect_speedup, from_pretrained, options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step
from tinyattn.preprocessing import Tokenizer

args = options(__doc__, [("--weights", dict(default=None, help="meet GPT-2 at the end: a hub name (gpt2, needs the "
                                                                 "hub extra) or a folder of its files"))])
if args.weights is not None:           # read first, so a missing file or network stops the run before training
    gpt2, tokenizer = from_pretrained(args.weights, models.GPT, Tokenizer)
corpus = CharCorpus(max_chars=60_000 if args.quick else None)
print(f"{len(corpus.train):,} training and {len(corpus.val):,} validation characters, {len(corpus.vocab)} symbols")
bigram_bpc = bigram_bits_per_char(corpus.train, corpus.val, len(corpus.vocab))
print(f"bigram model (counts of character pairs): {bigram_bpc:.3f} bits per character on validation")

# %% [markdown]
# ## The model
# Two layers train fastest in a CPU-minute budget. The position table has room for a 32-character prompt plus 256
# generated characters (block_size 288) for the KV-cache timing below; training windows are 128 characters.

# %%
prompt_len, new_tokens = 32, 256
config = models.GPTConfig(vocab_size=len(corpus.vocab), block_size=prompt_len + new_tokens,
                          n_layer=2, num_heads=4, d_model=64 if args.quick else 128)
model = models.GPT(config)
print(f"{model.num_parameters():,} parameters, {model.flops_per_token(config.block_size):,} FLOPs per token "
      "(forward + backward)")

# %% [markdown]
# ## What the model computes, by hand
# Before training it, write the whole forward pass out in NumPy from the model's own weights: token embedding plus
# position embedding, then each pre-norm block, x + Attention(LayerNorm(x)) and x + MLP(LayerNorm(x)), then a last
# LayerNorm and the output head. Causal attention: token t attends to tokens 0..t only. The check runs in float64 on
# a copy of the untrained model, so the two must agree to rounding.

# %%
def layer_norm(x, norm):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + norm.eps) * norm.weight.numpy() + norm.bias.numpy()


def linear(x, layer):
    return x @ layer.weight.numpy().T + (0 if layer.bias is None else layer.bias.numpy())


def gelu(x):                                         # x Phi(x), the exact form
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def block_by_hand(x, block, num_heads):
    t, d = x.shape
    q, k, v = np.split(linear(layer_norm(x, block.ln1), block.attn.qkv), 3, axis=-1)
    heads = [slice(h * d // num_heads, (h + 1) * d // num_heads) for h in range(num_heads)]
    attended = np.zeros((t, d))
    for h in heads:                                  # one head at a time: softmax(q k^T / sqrt(d_h) + causal mask) v
        scores = q[:, h] @ k[:, h].T / math.sqrt(d // num_heads)
        scores[np.triu_indices(t, 1)] = -np.inf
        p = np.exp(scores - scores.max(-1, keepdims=True))
        attended[:, h] = p / p.sum(-1, keepdims=True) @ v[:, h]
    x = x + linear(attended, block.attn.out_proj)
    return x + linear(gelu(linear(layer_norm(x, block.ln2), block.mlp.fc1)), block.mlp.fc2)


copy = models.GPT(config)
copy.load_state_dict(model.state_dict())
copy.double()
ids = corpus.val[:24]
x = copy.tok_emb.weight.numpy()[ids] + copy.pos_emb.weight.numpy()[:len(ids)]
for block in copy.blocks:
    x = block_by_hand(x, block, config.num_heads)
logits_by_hand = linear(layer_norm(x, copy.ln_f), copy.head)
gpt_by_hand_err = float(np.abs(logits_by_hand - copy(ta.tensor(ids[None])).numpy()[0]).max())
print(f"GPT forward by hand vs models.GPT, float64: max |difference| of the logits = {gpt_by_hand_err:.1e}")
assert gpt_by_hand_err < 1e-10

# %% [markdown]
# ## Your own attention, inside the model
# `F.use` runs a Function of your own wherever the library would run its own: in every module and every model, on
# the fast path and the reference path alike, until its `with` block ends. Here the hand-written attention of the
# `attention` exercise trains a copy of this GPT for three steps, beside a copy on the library's attention and on the
# same batches: the losses agree to float32 rounding. Yours, from lessons/exercises/attention.py, once no TODO is
# left in it (grade it first with `python -m lessons check attention`); until then the bundled solution (or, in a
# student copy without solutions, the library's reference attention). The line below says which ran.

# %%
import tinyattn.functional as F
from lessons.checking.learners_file import learners_or_bundled  # the repository root is on the path (tinyattn.lesson)
from tinyattn.functional.attention import ReferenceScaledDotProductAttention

Attention, which = learners_or_bundled("attention", "Attention", fallback=ReferenceScaledDotProductAttention)
print(f"the exercise's attention: {which}")


def three_steps_from_here():
    copy = models.GPT(config)
    copy.load_state_dict(model.state_dict())
    copy_optimizer = optim.AdamW(copy.parameters(), lr=3e-3)
    batches_rng, step_losses = np.random.default_rng(args.seed + 5), []
    for _ in range(3):
        x, y = corpus.batch("train", 4, 64, batches_rng)
        _, loss = copy(ta.tensor(x), ta.tensor(y))
        train_step(loss, copy_optimizer)
        step_losses.append(loss.item())
    return step_losses


library_losses = three_steps_from_here()
with F.use(scaled_dot_product_attention=Attention):
    own_losses = three_steps_from_here()
use_loss_diff = max(abs(a - b) for a, b in zip(own_losses, library_losses))
print(f"losses with the library's attention {[f'{l:.4f}' for l in library_losses]}, with the exercise's "
      f"{[f'{l:.4f}' for l in own_losses]}: largest difference {use_loss_diff:.1e}")
assert use_loss_diff < 1e-3, (f"the exercise's attention leaves the library's losses by {use_loss_diff:.1e}: "
                              "python -m lessons check attention says where")

# %% [markdown]
# ## Training on random windows

# %%
steps, batch_size, block = (40, 4, 64) if args.quick else (1000, 8, 128)
optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(warmup_steps=steps // 10, total_steps=steps,
                                                         min_ratio=0.1))
rng = np.random.default_rng(args.seed)
losses = []
for step in (bar := progress(range(steps), desc="training")):
    x, y = corpus.batch("train", batch_size, block, rng)
    _, loss = model(ta.tensor(x), ta.tensor(y))
    train_step(loss, optimizer, schedule, clip_parameters=model.parameters())
    losses.append(loss.item())
    if step % 10 == 0:
        bar.set_postfix(loss=f"{losses[-1]:.3f}")

# %% [markdown]
# ## Bits per character on held-out text
# Cross-entropy in nats divided by ln 2, averaged over fixed random validation windows.

# %%
model.eval()
eval_rng = np.random.default_rng(args.seed + 1)
with ta.no_grad():
    val_losses = [model(ta.tensor(x), ta.tensor(y))[1].item()
                  for x, y in (corpus.batch("val", 8, block, eval_rng) for _ in range(4 if args.quick else 32))]
val_bpc = float(np.mean(val_losses) / np.log(2))
print(f"GPT: {val_bpc:.3f} bits per character, {val_bpc / bigram_bpc:.2f} x the bigram model's" + quick_note(args))

# %% [markdown]
# ## Sampling, and what the KV cache saves
# Without a cache, every new character reruns the whole prefix through every layer. With one, each step feeds a
# single token and reads the earlier tokens' keys and values from the cache (tinyattn.nn.KVCache). Greedy decoding
# gives the same text both ways, so the timing compares equal work.

# %%
prompt = ta.tensor(corpus.val[None, :prompt_len])
start = time.perf_counter()
cached = model.generate(prompt, new_tokens, temperature=0, use_cache=True)
cached_s = time.perf_counter() - start
start = time.perf_counter()
uncached = model.generate(prompt, new_tokens, temperature=0, use_cache=False)
uncached_s = time.perf_counter() - start
assert (cached.numpy() == uncached.numpy()).all()
speedup = uncached_s / cached_s
print(f"{new_tokens} new tokens: {uncached_s:.2f} s without the cache, {cached_s:.2f} s with it ({speedup:.1f}x)")
ta.manual_seed(args.seed + 2)
sample = model.generate(prompt, block - prompt_len, temperature=0.8, top_k=20).numpy()[0]   # within trained positions
print("sample:\n" + "".join(corpus.vocab.itos[i] for i in sample))
window = min(20, len(losses))
train_bits = np.convolve(losses, np.ones(window) / window, mode="valid") / np.log(2)   # nats -> bits, smoothed
steps_axis = np.arange(window - 1, len(losses))                                          # each mean's last step
viz.save(viz.curves({f"training batches (mean of {window} steps)": (steps_axis, train_bits)},
                    ylabel="bits per character",
                    title="GPT training, bits per character",
                    hlines={f"bigram model, validation ({bigram_bpc:.2f})": bigram_bpc,
                            f"GPT, validation ({val_bpc:.2f})": val_bpc}),
         plot_path(args, "06_gpt_loss.png"))

# %% [markdown]
# ## Where each head looks
# The weights of every head on a validation snippet. Causal: each row (a character) attends only to itself and the
# characters before it, so everything above the diagonal is zero. Look for heads that attend to the previous
# character (a bright sub-diagonal), to the start of the current word or line, or to the same character earlier on.

# %%
snippet = corpus.val[:40]
chars = [corpus.vocab.itos[i] for i in snippet]
with ta.no_grad():
    _, maps = model(ta.tensor(snippet[None]), return_attention=True)
maps = np.stack([m.numpy()[0] for m in maps])                                   # (layers, heads, 40, 40)
assert np.allclose(np.triu(maps, k=1), 0) and np.allclose(maps.sum(-1), 1)     # causal rows that sum to 1
previous = interpret.previous_token_score(maps[:, None])    # (layers, heads): mean weight on the previous char
print("mean weight on the previous character, per layer and head:\n" + np.array2string(previous, precision=2))
viz.save(viz.attention_grid(maps, chars, chars, row_names=[f"layer {i}" for i in range(len(maps))],
                            title="causal self-attention of every head"),
         plot_path(args, "06_gpt_attention.png"))
explorer = viz.explore_attention(maps, chars, chars, title="GPT self-attention")

# %% [markdown]
# ## Meet GPT-2
# The model above is GPT-2's architecture at toy size. GPT-2 small itself (12 layers, 12 heads, d_model 768, 124M
# parameters, trained on 40 GB of web text) loads into the same class: `models.GPT.from_pretrained("gpt2")` reads
# Hugging Face's files (config.json, model.safetensors) and translates their names in one place
# (tinyattn/models/hf_gpt2.py); `preprocessing.Tokenizer` turns text into its 50,257 byte-pair tokens. Run the lesson
# with `--weights gpt2` (after `pip install -e ".[hub]"`; 548 MB, downloaded once) or `--weights FOLDER` holding those
# files. Then: GPT-2 continues a prompt, its heads are drawn on a sentence, and its previous-token heads (the
# previous-token score of tinyattn.interpret: mean weight from each token to the one before it) are set beside the
# ones the small model above learned on characters.

# %%
gpt2_previous = None
if args.weights is None:
    print("GPT-2 not loaded. To meet it: pip install -e \".[hub]\" && python -m lessons 06 --weights gpt2")
else:
    print(f"GPT-2 from {args.weights}: {gpt2.num_parameters():,} parameters, {gpt2.config.n_layer} layers x "
          f"{gpt2.config.num_heads} heads")
    prompt_ids = tokenizer.encode("The attention mechanism lets a model")
    new = min(8 if args.quick else 24, gpt2.config.block_size - len(prompt_ids))
    continued = gpt2.generate(ta.tensor([prompt_ids]), new, temperature=0)
    print("greedy continuation:", repr(tokenizer.decode(continued.numpy()[0])))
    sentence = "The cat sat on the mat because the cat was tired."
    sentence_ids = tokenizer.encode(sentence)[:gpt2.config.block_size]
    pieces = [tokenizer.decode([i]) for i in sentence_ids]
    with ta.no_grad(), interpret.record(gpt2) as recording:
        gpt2(ta.tensor([sentence_ids]))
    gpt2_maps = [recording.attention[f"blocks.{i}.attn"] for i in range(gpt2.config.n_layer)]
    gpt2_previous = interpret.previous_token_score(gpt2_maps)                   # (layers, heads)
    layer, head = np.unravel_index(gpt2_previous.argmax(), gpt2_previous.shape)
    print(f"GPT-2's strongest previous-token head: layer {layer} head {head}, score {gpt2_previous.max():.2f} "
          f"(the small character model's best: {previous.max():.2f})")
    viz.save(viz.head_score_map(gpt2_previous, title="GPT-2: previous-token score per head"),
             plot_path(args, "06_gpt2_previous_token.png"))
    gpt2_explorer = viz.explore_attention(np.stack([m.numpy()[0] for m in gpt2_maps]), pieces, pieces,
                                          title="GPT-2 self-attention")
    gpt2_explorer.select(int(layer), int(head), len(pieces) - 1)
    viz.save(gpt2_explorer.figure, plot_path(args, "06_gpt2_attention.png"))

# %%
if not args.quick:
    assert val_bpc <= 0.8 * bigram_bpc, (val_bpc, bigram_bpc)
expect_speedup("the KV cache", speedup, 2)
report(lm_val_bpc=val_bpc, lm_bigram_bpc=bigram_bpc, kv_cache_speedup=speedup, parameters=model.num_parameters(),
       gpt_by_hand_max_abs_err=gpt_by_hand_err, prev_token_score_max=float(previous.max()),
       **({} if gpt2_previous is None else {"gpt2_prev_token_score_max": float(gpt2_previous.max())}))
