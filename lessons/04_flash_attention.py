# %% [markdown]
# # 04 · Flash attention: the same answer in O(N) memory
#
# Naive attention materialises the N x N matrix of scores (and, for backward, of probabilities). At N = 4096 with 8
# heads in float32 that is 512 MiB per matrix. FlashAttention (Dao et al. 2022; Dao 2023) never forms it: it walks
# over blocks of keys with an *online softmax*, keeping per query only a running max, a running sum and an
# unnormalised output, and recomputes each block's probabilities in backward from the saved log-sum-exp.
#
# We build the online softmax by hand, then blockwise attention by hand, check both against the plain definitions,
# and then measure the package's F.flash_attention with `python -m tinyattn.bench` against the whole score matrix
# and against F.scaled_dot_product_attention as the models run it.

# %%
import json
import subprocess
import sys

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import viz
from tinyattn.viz.display import static_page
from tinyattn.lesson import expect_speedup, options, plot_path, progress, report

args = options(__doc__)
rng = np.random.default_rng(args.seed)

# %% [markdown]
# ## Online softmax, by hand
# softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m) for any m; m = max keeps exp from overflowing. Reading x in
# chunks, keep the max m and the sum l of exp(x - m) so far. When a chunk raises the max to m', rescale the old sum
# by exp(m - m') before adding the chunk's terms. (Exercise: `lessons/exercises/online_softmax.py`, masked rows too.)

# %%
x = rng.standard_normal(1000) * 30
m, l = -np.inf, 0.0
for chunk in np.split(x, 10):
    m_new = max(m, chunk.max())
    l = l * np.exp(m - m_new) + np.exp(chunk - m_new).sum()
    m = m_new
online = np.exp(x - m) / l
full = F.softmax(ta.tensor(x)).numpy()
print(f"online softmax vs softmax: max |difference| = {np.abs(online - full).max():.1e}")
assert np.allclose(online, full, atol=1e-15)

# %% [markdown]
# ## Blockwise attention, by hand: forward
# The same trick with a weighted sum of values carried along: rescale the accumulated output by exp(m - m') too.
# At the end of a row block, keep one number per query besides its output: the log-sum-exp L = m + log(l). It is
# all the backward needs to rebuild any block of probabilities exactly, as P = exp(S - L).
# (Exercise: `lessons/exercises/flash_forward.py`, with masks, ragged blocks and grouped heads.)

# %%
def blockwise_attention(q, k, v, block=64):
    n, d = q.shape
    out, lse = np.empty((n, v.shape[1])), np.empty((n, 1))
    for r in range(0, n, block):
        qi = q[r:r + block] / np.sqrt(d)
        m = np.full((len(qi), 1), -np.inf)
        l = np.zeros((len(qi), 1))
        acc = np.zeros((len(qi), v.shape[1]))
        for c in range(0, len(k), block):
            s = qi @ k[c:c + block].T
            m_new = np.maximum(m, s.max(1, keepdims=True))
            p = np.exp(s - m_new)
            scale = np.exp(m - m_new)
            l = l * scale + p.sum(1, keepdims=True)
            acc = acc * scale + p @ v[c:c + block]
            m = m_new
        out[r:r + block] = acc / l
        lse[r:r + block] = m + np.log(l)
    return out, lse


q, k, v = (rng.standard_normal((300, 32)) for _ in range(3))
qt, kt, vt = (ta.tensor(t, requires_grad=True) for t in (q, k, v))
sdpa_out = F.scaled_dot_product_attention(qt, kt, vt)
out, lse = blockwise_attention(q, k, v)
print(f"blockwise by hand vs F.scaled_dot_product_attention: {np.abs(out - sdpa_out.numpy()).max():.1e}")
assert np.allclose(out, sdpa_out.numpy(), atol=1e-12)
_, library_lse = F.flash_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), return_lse=True)   # the package's L
lse_err = float(np.abs(lse[:, 0] - library_lse.numpy()).max())
print(f"L by hand vs F.flash_attention(..., return_lse=True): {lse_err:.1e}")
assert lse_err < 1e-12

# %% [markdown]
# ## Blockwise attention, by hand: backward
# Lesson 03 derived attention's backward: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K s,
# dK = dS^T Q s. Two facts make it blockwise. Each block of P comes back exactly from the saved L, P = exp(S - L).
# And rowsum(dP * P) needs whole rows of P, but it equals D = rowsum(dO * O), one number per query computed before
# the loop: sum_j dP_ij P_ij = sum_j (dO_i . v_j) P_ij = dO_i . sum_j P_ij v_j = dO_i . O_i. So for every pair of a
# key block j and a query block i: dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P * (dP - D_i), dQ_i += s dS K_j,
# dK_j += s dS^T Q_i; nothing of size N x N is ever held. (Exercise: `lessons/exercises/flash_backward.py`.)

# %%
def blockwise_attention_backward(q, k, v, out, lse, grad_out, block=64):
    s = 1 / np.sqrt(q.shape[1])
    d = (grad_out * out).sum(1, keepdims=True)                   # D = rowsum(dO * O)
    grad_q, grad_k, grad_v = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for c in range(0, len(k), block):                            # a key block ...
        kj, vj = k[c:c + block], v[c:c + block]
        for r in range(0, len(q), block):                        # ... against every query block
            p = np.exp(s * q[r:r + block] @ kj.T - lse[r:r + block])
            grad_v[c:c + block] += p.T @ grad_out[r:r + block]
            grad_s = p * (grad_out[r:r + block] @ vj.T - d[r:r + block])
            grad_q[r:r + block] += s * grad_s @ kj
            grad_k[c:c + block] += s * grad_s.T @ q[r:r + block]
    return grad_q, grad_k, grad_v


grad_out = rng.standard_normal(out.shape)
by_hand = blockwise_attention_backward(q, k, v, out, lse, grad_out)
sdpa_out.backward(ta.tensor(grad_out))
backward_err = max(float(np.abs(mine - t.grad.numpy()).max()) for mine, t in zip(by_hand, (qt, kt, vt)))
print(f"blockwise backward by hand vs F.scaled_dot_product_attention's gradients: {backward_err:.1e}")
assert backward_err < 1e-12

# %% [markdown]
# ## Watching the loop, tile by tile
# `F.trace_flash_attention` runs the package's reference twin (`ReferenceFlashAttention`, the two functions above
# with masks and heads) with a recorder switched on, and hands back one plain record per tile it visits: the block's
# scores, m and l before and after, the rescale alpha = exp(m - m'), the output so far; in backward the recomputed P,
# dS and the block's dQ, dK, dV. N = 64 in tiles of 16, one head, causal: 4 + 3 + 2 + 1 = 10 tiles, the six above
# the diagonal skipped. Every row's last m must be its row max exactly (a max never rounds), and m + log l its
# log-sum-exp. The same records drive a frame per step (below), a GIF (`viz.flash_animation`, written on a full run),
# an HTML player (`viz.flash_player_html`; a quick run and the course site play the last row block's tiles only, as
# every frame is an image), and `python -m lessons flash` walks them in a terminal, Enter by Enter.

# %%
tq, tk, tv = (rng.standard_normal((1, 1, 64, 16)) for _ in range(3))
traced = F.trace_flash_attention(tq, tk, tv, is_causal=True, block_size=16)
forward_records = [r for r in traced.records if r["pass"] == "forward"]
trace_tiles = len(forward_records)
last_of_block = {r["rows"]: r for r in forward_records}                  # each row block's last tile wins
m_end = np.concatenate([last_of_block[rows]["m"] for rows in sorted(last_of_block)], axis=-2)[0, 0, :, 0]
l_end = np.concatenate([last_of_block[rows]["l"] for rows in sorted(last_of_block)], axis=-2)[0, 0, :, 0]
scores = (1 / np.sqrt(16)) * (tq @ tk.swapaxes(-1, -2))[0, 0]
scores[np.triu_indices(64, 1)] = -np.inf
row_max = scores.max(axis=1)
log_sum_exp = row_max + np.log(np.exp(scores - row_max[:, None]).sum(axis=1))
trace_max_error = float(max(np.abs(m_end - row_max).max(), np.abs(m_end + np.log(l_end) - log_sum_exp).max()))
print(f"{trace_tiles} tiles visited; |m - row max| and |m + log l - log-sum-exp| at most {trace_max_error:.1e}")
rescales = {i: sum(r["alpha"][0, 0, i - 48, 0] < 1 for r in forward_records[6:]) for i in range(48, 64)}
row = max(rescales, key=rescales.get)              # of the last row block (four tiles), the row rescaled most often
for r in forward_records:
    if r["rows"][0] <= row < r["rows"][1]:
        i = row - r["rows"][0]
        print(f"  row {row}, keys {r['cols'][0]:2d}-{r['cols'][1] - 1:2d}: m {r['m_before'][0, 0, i, 0]:7.3f} -> "
              f"{r['m'][0, 0, i, 0]:7.3f}, rescale {r['alpha'][0, 0, i, 0]:.3f}, l {r['l'][0, 0, i, 0]:7.3f}")
assert trace_tiles == 10 and trace_max_error <= 1e-12
rescaled = [i for i, r in enumerate(forward_records) if r["alpha"].min() < 1]
fig = viz.flash_frame(traced, rescaled[-1])                    # the trace itself: its records, output and grads
viz.save(fig, plot_path(args, "04_flash_tile.png"))
last_row_block = [i for i, r in enumerate(traced.records)
                  if r["pass"] == "forward" and r["rows"] == forward_records[-1]["rows"]]
if not args.quick:                                                        # seconds of drawing: full runs only
    viz.announce("animation", viz.flash_animation(traced, plot_path(args, "04_flash_tiles.gif")))
short = args.quick or static_page()      # a quick run, and a page of the course site: the last row block's four tiles
viz.save(viz.flash_player_html(traced, steps=last_row_block if short else None), plot_path(args, "04_flash_tiles.html"))

# %% [markdown]
# The package's fast twin (`flash_attention_fast.py`) has no running max to watch: it fixes each row's shift from
# the row's first block and never rescales. Softmax does not care which shift is taken (exp(s - c) / sum exp(s - c)
# is the same for every c); the max only keeps exp from overflowing. A shift from the first block is near enough
# for most rows, saves the alpha multiplications of every later block, and the rare row whose l grows past a bound
# is simply made again with its true max.

# %% [markdown]
# ## The package's flash attention, forward and backward, in float32
# `F.flash_attention` runs the two functions above, vectorised over batch and heads, with masks and grouped heads:
# `ReferenceFlashAttention` in tinyattn/functional/flash_attention.py is written in the algorithm's own names (m,
# l, acc, L, D), and its fast twin (flash_attention_fast.py) arranges the same loops for speed. Here: causal, 8
# heads, a length that is no multiple of the block size; outputs and all three gradients against the sdpa path.

# %%
ta.manual_seed(args.seed)
n = 300 if args.quick else 1000
qt, kt, vt = (ta.randn(2, 8, n, 64, requires_grad=True) for _ in range(3))
grad_out = ta.randn(2, 8, n, 64)
results = {}
for name, attend in (("sdpa", F.scaled_dot_product_attention), ("flash", F.flash_attention)):
    out = attend(qt, kt, vt, is_causal=True)
    for t in (qt, kt, vt):
        t.grad = None
    (out * grad_out).sum().backward()
    results[name] = [out.numpy()] + [t.grad.numpy() for t in (qt, kt, vt)]
flash_err = max(float(np.abs(a - b).max()) for a, b in zip(results["flash"], results["sdpa"]))
print(f"flash vs sdpa, float32, output and gradients: max |difference| = {flash_err:.1e}")

# %% [markdown]
# ## Memory and time against N
# Each measurement runs `python -m tinyattn.bench attention` in a fresh process and reads `traced_peak_mib`: the
# most memory that one forward+backward allocated at once, as NumPy reports it to Python's tracemalloc. (The bench
# also reports `extra_mib`, the growth of the process's peak resident memory, which the allocator can blur.)
#
# Three paths: `reference` is lesson 03's math, the whole N x N matrix of scores at once; `sdpa` is
# `F.scaled_dot_product_attention` as the models run it, which computes the scores in parts of 64 query rows and
# leaves out the keys a causal mask hides from a whole part, so it holds about half the matrix, still growing as
# N^2 (it keeps the probabilities for backward); `flash` keeps none of it.

# %%
def bench(impl, n):
    command = [sys.executable, "-m", "tinyattn.bench", "attention", "--impl", impl, "--n", str(n), "--heads", "8",
               "--dim", "64", "--causal", "--reps", "1" if args.quick else "2"]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


sizes = [256, 512] if args.quick else [512, 1024, 2048, 4096]
measured = {"reference": {}, "sdpa": {}, "flash": {}}
for n in progress(sizes, desc="benchmarking"):
    for impl in measured:
        measured[impl][n] = bench(impl, n)
largest = sizes[-1]


def ratio(key, impl):
    """flash's figure over impl's at the largest N."""
    return measured["flash"][largest][key] / measured[impl][largest][key]


memory_ratio, time_ratio = ratio("traced_peak_mib", "reference"), ratio("median_s", "reference")
half = sizes[-2]
growth_of = {impl: measured[impl][largest]["traced_peak_mib"] / measured[impl][half]["traced_peak_mib"]
             for impl in ("reference", "flash")}
for n in sizes:
    print(f"N={n:5d}" + "".join(f"   {impl} {measured[impl][n]['traced_peak_mib']:7.1f} MiB "
                                f"{measured[impl][n]['median_s']:6.2f} s" for impl in measured))
print(f"at N={largest}: flash uses {memory_ratio:.3f}x the whole score matrix's traced peak memory and "
      f"{time_ratio:.2f}x its time; against the sdpa path, {ratio('traced_peak_mib', 'sdpa'):.3f}x the memory and "
      f"{ratio('median_s', 'sdpa'):.2f}x the time")
print(f"from N={half} to N={largest} the whole matrix's memory grew {growth_of['reference']:.2f}x (N^2: 4x), flash's "
      f"{growth_of['flash']:.2f}x (N: 2x), on {measured['flash'][largest]['machine']['threads']} threads")
if not args.quick:                      # at the quick run's small N the whole matrix can win
    expect_speedup(f"flash attention against the whole score matrix at N={largest}", 1 / time_ratio, 1)

# %%
fig, axes = viz.plt.subplots(1, 2, figsize=(10, 3.6))
for impl, marker, label in (("reference", "^", "reference: whole matrix"), ("sdpa", "o", "sdpa: the matrix in parts"),
                            ("flash", "s", "flash")):
    axes[0].plot(sizes, [measured[impl][n]["traced_peak_mib"] for n in sizes], marker=marker, label=label)
    axes[1].plot(sizes, [measured[impl][n]["median_s"] for n in sizes], marker=marker, label=label)
# Guide lines through the first measurement: what growing as N and as N^2 would look like from there.
growth = np.asarray(sizes, dtype=float) / sizes[0]
first_whole, first_flash = measured["reference"][sizes[0]], measured["flash"][sizes[0]]
axes[0].plot(sizes, first_whole["traced_peak_mib"] * growth ** 2, color="0.5", linestyle="--", linewidth=1,
             label="guide: grows as N^2")
axes[0].plot(sizes, first_flash["traced_peak_mib"] * growth, color="0.5", linestyle=":", linewidth=1,
             label="guide: grows as N")
axes[1].plot(sizes, first_whole["median_s"] * growth ** 2, color="0.5", linestyle="--", linewidth=1,
             label="guide: grows as N^2")
axes[0].set(ylabel="peak memory of one step (MiB, traced)",
            title="memory of forward+backward, causal, 8 heads, d = 64")
axes[1].set(ylabel="forward+backward (s, median)", title="time of forward+backward, same sizes")
for ax in axes:
    ax.set(xscale="log", yscale="log", xlabel="sequence length N")
    ax.set_xticks(sizes, labels=[str(n) for n in sizes])
    ax.minorticks_off()
    ax.tick_params(labelsize=8)
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
fig.tight_layout()
viz.save(fig, plot_path(args, "04_flash_memory_time.png"))

# %% [markdown]
# ## What each path keeps for backward
# A process's peak mixes what backward needs with the temporaries of the moment. `ta.memory_report(out)` reads
# instead what the graph behind out holds: every array each Function's ctx keeps for its backward, named, counted
# once by the memory it owns. One attention layer (8 heads, d = 64, causal), the two lengths above: the sdpa path
# keeps its weights, in parts of 64 query rows that leave out the keys a causal mask hides, a term that grows as
# N^2; flash keeps per query only its output, its query and two numbers (the fast twin's shift m and 1 / l), so all
# it keeps grows as N. (q, k and v are leaf tensors here, and the report counts them apart; in a
# model they are one more layer's outputs.)

# %%
def kept_for_backward(attend, n):
    q, k, v = (ta.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
    return ta.memory_report(attend(q, k, v, is_causal=True))


kept = {}
for n in (half, largest):
    for name, attend in (("sdpa", F.scaled_dot_product_attention), ("flash", F.flash_attention)):
        arrays = kept_for_backward(attend, n).arrays()
        tokens = [row for row in arrays if row["shape"][-2] == n and row["shape"][-1] != n]    # one row a query
        weights = [row for row in arrays if row not in tokens]
        kept[name, n] = (sum(row["bytes"] for row in arrays), sum(row["bytes"] for row in weights))
        print(f"{name} at N={n}: keeps {kept[name, n][0] / 2 ** 20:6.2f} MiB: "
              + ", ".join(f"{row['name']} {row['shape'][-2:]}" for row in tokens)
              + (f"; weights {kept[name, n][1] / 2 ** 20:.2f} MiB in {len(weights)} parts, from "
                 f"{weights[0]['shape'][-2:]} to {weights[-1]['shape'][-2:]}" if weights else "; no weights"))
saved_bytes_sdpa, saved_bytes_flash = kept["sdpa", largest][0], kept["flash", largest][0]
weights_growth = kept["sdpa", largest][1] / kept["sdpa", half][1]
print(f"from N={half} to N={largest}: the sdpa path's weights grew {weights_growth:.2f}x (N^2 with the causal "
      f"parts: {largest * (largest + 64) / (half * (half + 64)):.2f}x); flash keeps no weights and all it keeps grew "
      f"{kept['flash', largest][0] / kept['flash', half][0]:.2f}x")
assert kept["flash", largest][1] == 0 and kept["flash", largest][0] == 2 * kept["flash", half][0]
assert weights_growth > 3

# %% [markdown]
# ## Work that can run side by side
# In the forward, each row block of queries needs nothing from the others: its running max, sum and output are its
# own. In the backward, each column block of keys owns its dK and dV, while every column block adds to all of dQ.
# FlashAttention-2 parallelises along exactly these lines, and so does `F.flash_attention` on the CPU: tinyattn's
# threads (`tinyattn/cpu/threads.py`) deal out row blocks in the forward and column blocks in the backward. Where
# the threads divide the batch or the heads into shares of 4 or more, each thread takes whole entries or heads and
# adds into their rows of dQ alone; else each thread sums a dQ of its own, added up at the end, and flash's memory
# grows with the number of threads too (still as N). `ta.set_num_threads(1)` runs the loops above exactly as written.

# %% [markdown]
# ## On a GPU: the same loops as CUDA kernels
# Every block step above is a dozen array operations, each a pass over memory, and on a GPU each is also a kernel
# launch. `tinyattn/functional/flash_attention.cu` writes the same loops as three CUDA kernels: one thread block per
# 64 query rows and head, K and V staged in shared memory tile by tile, the running max, sum and output kept in
# registers; the backward recomputes P = exp(S - L) the same way. `F.flash_attention` runs them for float32 CUDA
# tensors (`TINYATTN_DEVICE=cuda`); docs/performance.md (GPU) compares them with PyTorch. (The benchmarks in this
# lesson run on the CPU, where tracemalloc can see every array.)

# %%
assert flash_err <= 1e-5, flash_err
if not args.quick:
    # the growth, not the ratio at N=4096: that one rises with the threads wherever each sums a dQ of its own
    assert growth_of["flash"] <= 2.5 and growth_of["reference"] >= 3.5, growth_of
    assert memory_ratio <= 0.5, memory_ratio
# The RESULT keys keep impl="sdpa"'s old name, "naive", so that RESULT lines compare with earlier runs.
report(flash_max_abs_err=flash_err, blockwise_backward_max_abs_err=backward_err, flash_memory_ratio=memory_ratio,
       flash_memory_growth=growth_of["flash"], whole_matrix_memory_growth=growth_of["reference"],
       flash_time_ratio=time_ratio, flash_vs_naive_memory_ratio=ratio("traced_peak_mib", "sdpa"),
       flash_vs_naive_time_ratio=ratio("median_s", "sdpa"), largest_n=largest, trace_tiles=trace_tiles,
       trace_max_error=trace_max_error, saved_bytes_naive=saved_bytes_sdpa, saved_bytes_flash=saved_bytes_flash)
