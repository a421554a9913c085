# %% [markdown]
# # 17 · Swin, looked at: windows, shifted windows and their mask, the learned relative bias
#
# Swin (Liu et al. 2021, section 3.2, "Shifted Window based Self-Attention") attends only inside windows of M x M
# tokens, so the scores of one layer number M^2 * H * W instead of (H * W)^2: linear in the image's area. Windows
# alone never exchange information, so every second block shifts them by M/2. The shifted windows at the border are
# smaller; instead of padding them, Swin rolls the map cyclically by -M/2, which packs the border pieces into whole
# windows, and masks the pairs of tokens that the roll brought together from opposite sides of the image. Positions
# enter as a learned bias per head and relative offset, added to the scores: A = softmax(Q K^T / sqrt(d) + B) V.
#
# Here: the windows and the mask drawn from the library's own functions (`nn.window_partition`,
# `nn.shifted_window_mask`); a check that roll + windows + mask equals attention within the true shifted windows; the
# score counts of a real Swin layer against the formulas, for the paper's sizes; and the relative bias a small Swin
# learned on the digits.

# %%
import time

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, nn, optim, viz
from tinyattn.datasets import DigitCanvases, batches
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__)
grid, M = 8, 4                    # an 8x8 map of tokens, windows of 4x4 (the digits Swin's first stage)
shift = M // 2

# %% [markdown]
# ## Windows, shifted windows, and the mask
# Label every token of the 8x8 map by its position, cut the map into windows with `nn.window_partition`, and see which
# tokens share a window. Then roll the map by -2 in both directions and cut again: the windows of the rolled map are
# the shifted windows, except that the last window row and column hold tokens from both edges of the image.
# `nn.shifted_window_mask` labels the 3 x 3 regions the roll creates and lets two tokens attend to each other only
# within one region.

# %%
position = np.arange(grid * grid, dtype=np.float64).reshape(1, grid, grid, 1)
windows = nn.window_partition(ta.tensor(position), M).numpy()[..., 0].astype(int)          # (4 windows, 16)
rolled = ta.roll(ta.tensor(position), (-shift, -shift), (1, 2))
shifted_windows = nn.window_partition(rolled, M).numpy()[..., 0].astype(int)
window_of = np.empty(grid * grid, dtype=int)
shifted_window_of = np.empty(grid * grid, dtype=int)
for w, members in enumerate(windows):
    window_of[members] = w
for w, members in enumerate(shifted_windows):
    shifted_window_of[members] = w
mask = nn.shifted_window_mask(grid, grid, M, shift).numpy()                                # (4, 16, 16)
region = np.empty(grid * grid, dtype=int)                    # which group of tokens may attend to each other
for w, members in enumerate(shifted_windows):
    _, first = np.unique(mask[w], axis=0, return_inverse=True)
    region[members] = w * 10 + first.reshape(-1)
print("tokens per window, plain:", np.bincount(window_of).tolist(), "| shifted (rolled map):",
      np.bincount(shifted_window_of).tolist())
sizes = sorted(np.bincount(np.unique(region, return_inverse=True)[1]).tolist())
print(f"after masking, the shifted windows split into {len(sizes)} groups of sizes {sizes}")
assert sizes == [4] * 4 + [8] * 4 + [16]      # one whole 4x4 window, four 4x2 / 2x4 edge pieces, four 2x2 corners

fig, axes = viz.plt.subplots(1, 3 + len(mask), figsize=(15, 3.1),
                             gridspec_kw={"width_ratios": [1.2, 1.2, 1.2] + [1] * len(mask)})
for ax, labels, title in ((axes[0], window_of, "windows"), (axes[1], shifted_window_of,
                                                            "rolled by -2: windows\n(original positions)"),
                          (axes[2], region, "shifted windows after masking:\ngroups that attend together")):
    values = np.unique(labels, return_inverse=True)[1].reshape(grid, grid)
    ax.imshow(values, cmap="tab20" if labels is region else "Pastel1")
    for y in range(grid):
        for x in range(grid):
            ax.text(x, y, str(y * grid + x), ha="center", va="center", fontsize=6)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
for w, ax in enumerate(axes[3:]):
    ax.imshow(mask[w], cmap="gray", vmin=0, vmax=1)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"mask, rolled window {w}\n(white: may attend)", fontsize=8)
viz.save(fig, plot_path(args, "17_swin_windows.png"))

# %% [markdown]
# ## Roll, windows and mask compute attention within the shifted windows
# On the original map, the shifted windows start at rows and columns 2 and 6; the first two rows (and columns) form a
# piece of their own. Attention inside those groups, written directly as full attention over all 64 tokens with a
# mask (and the relative bias for each pair), against Swin's way (roll, `window_partition`, `WindowAttention` with
# the mask, `window_reverse`, roll back), in float64.

# %%
ta.manual_seed(args.seed)
dim, heads = 8, 2
attention = nn.WindowAttention(dim, M, heads).double()
nn.init.normal_(attention.relative_bias.table, std=1.0)                          # a bias that matters
x = ta.randn(2, grid, grid, dim, dtype="float64")
mask_t = nn.shifted_window_mask(grid, grid, M, shift)
swin_way = ta.roll(x, (-shift, -shift), (1, 2))
swin_way = nn.window_reverse(attention(nn.window_partition(swin_way, M), mask=mask_t), M, grid, grid)
swin_way = ta.roll(swin_way, (shift, shift), (1, 2))

piece = np.where(np.arange(grid) < shift, -1, (np.arange(grid) - shift) // M)    # shifted-window row (or column)
ys, xs = np.divmod(np.arange(grid * grid), grid)
together = (piece[ys][:, None] == piece[ys][None, :]) & (piece[xs][:, None] == piece[xs][None, :])
dy, dx = ys[:, None] - ys[None, :], xs[:, None] - xs[None, :]
table = attention.relative_bias.table.numpy()                                     # ((2M-1)^2, heads)
offset_row = np.where(together, (dy + M - 1) * (2 * M - 1) + (dx + M - 1), 0)
bias = np.where(together[None], table[offset_row].transpose(2, 0, 1), -np.inf)    # (heads, 64, 64)
tokens = x.reshape(2, grid * grid, dim)
q, k, v = (t.reshape(2, grid * grid, heads, dim // heads).transpose(1, 2)
           for t in attention.qkv(tokens).split(dim, dim=-1))
direct = F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(bias))
direct = attention.proj(direct.transpose(1, 2).reshape(2, grid * grid, dim)).reshape(2, grid, grid, dim)
shift_err = float(np.abs(direct.numpy() - swin_way.numpy()).max())
print(f"roll + windows + mask vs attention within the shifted windows: max |difference| = {shift_err:.1e}")
assert shift_err < 1e-12

# %% [markdown]
# ## How many scores: M^2 * H * W against (H * W)^2
# Counted from a real layer: `WindowAttention` keeps the weights it computed (`need_weights=True`), one M^2 x M^2
# matrix per window and head. For a map of H x W tokens that is (H*W / M^2) windows of M^4 scores, M^2 * H * W per
# head, where global attention over the same tokens needs (H*W)^2. The counts below are per head and layer; the
# sizes are the paper's: Swin-T at 224 x 224 (section 3.3: 4x4 patches, so a 56x56 map in stage 1, halved in each of
# 4 stages, M = 7), and 800 x 800, about the size of its detection images (section 4.2: shorter side up to 800).

# %%
def counted_scores(h, w, window):
    layer = nn.WindowAttention(8, window, 1)
    tokens = ta.zeros(1, h, w, 8)
    with ta.no_grad():
        layer(nn.window_partition(tokens, window), need_weights=True)
    return layer.last_weights.numel()                                            # (windows, 1 head, N, N)


window_scores_match = True
for h, window in ((8, 4), (16, 4), (28, 7), (56, 7)):
    counted, formula = counted_scores(h, h, window), window ** 2 * h * h
    print(f"{h}x{h} map, M = {window}: counted {counted:,} scores, formula M^2*H*W = {formula:,}")
    window_scores_match &= counted == formula
assert window_scores_match
rows = [("digits Swin, stage 1", 8, 4), ("Swin-T 224, stage 1", 56, 7), ("stage 2", 28, 7), ("stage 3", 14, 7),
        ("stage 4", 7, 7), ("800x800, stage 1", 200, 7)]
print(f"{'map':22} {'H*W':>7} {'windows M^2*H*W':>16} {'global (H*W)^2':>16} {'ratio':>7}")
for name, side, window in rows:
    n = side * side
    print(f"{name:22} {n:7,} {window ** 2 * n:16,} {n * n:16,} {n / window ** 2:7.0f}x")

# %% [markdown]
# ## The relative bias a Swin learned on the digits
# A small Swin (the library's `models.Swin`: 2x2 patches of the 16x16 digits, so an 8x8 map of tokens, windows of 4,
# two stages) trains for a while; then each head's bias table of its first two blocks is drawn as a map over the
# offsets (dy, dx) of the key from the query, from -3 to 3, the centre being "the token itself" (lesson 11 draws its
# ViT's relative bias the same way). The bias started as small random numbers (standard deviation 0.02).

# %%
data = DigitCanvases(canvas=16, scale=2, jitter=False)
train, test = data.split["train"], data.split["test"]
epochs = 2 if args.quick else 40
if args.quick:
    train = train[:320]
ta.manual_seed(args.seed)
swin = models.Swin(models.SwinConfig(image_size=16, patch_size=2, embed_dim=16, depths=(2, 2), num_heads=(2, 4),
                                     window_size=4))
optimizer = optim.AdamW(swin.parameters(), lr=5e-3, weight_decay=0.05)
total = epochs * -(-len(train) // 64)
schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(total // 10, total))
rng = np.random.default_rng(args.seed)
start = time.perf_counter()
for _ in progress(range(epochs), desc="Swin"):
    for idx in batches(len(train), 64, rng):
        rows = train[idx]
        loss = F.cross_entropy(swin(ta.tensor(data.images[rows])), ta.tensor(data.labels[rows]))
        train_step(loss, optimizer, schedule)
swin.eval()
with ta.no_grad():
    swin_acc = float((swin(ta.tensor(data.images[test])).numpy().argmax(-1) == data.labels[test]).mean())
print(f"Swin: test accuracy {swin_acc:.3f} after {epochs} epochs ({time.perf_counter() - start:.0f} s), "
      f"{swin.num_parameters():,} parameters" + quick_note(args))

# %%
blocks = list(swin.stages[0])[:2]                     # stage 1: the plain block, then the shifted one
tables = [b.attn.relative_bias.table.numpy().reshape(2 * M - 1, 2 * M - 1, -1) for b in blocks]
offsets = np.arange(-(M - 1), M)
distance = np.abs(offsets)[:, None] + np.abs(offsets)[None, :]                    # |dy| + |dx|
for i, t in enumerate(tables):
    for head in range(t.shape[-1]):
        near, far = t[..., head][distance <= 1].mean(), t[..., head][distance >= 3].mean()
        print(f"block {i} ({'shifted' if blocks[i].shift else 'plain'}) head {head}: mean bias at distance <= 1 "
              f"{near:+.2f}, at distance >= 3 {far:+.2f} (spread at the start: 0.02)")
viz.save(viz.relative_bias([b.attn.relative_bias.table.numpy() for b in blocks], M,
                           [f"block {i} ({'shifted' if b.shift else 'plain'})" for i, b in enumerate(blocks)]),
         plot_path(args, "17_swin_relative_bias.png"))

# %%
if not args.quick:
    assert swin_acc >= 0.9, swin_acc
report(swin_shift_mask_err=shift_err, window_scores_match=window_scores_match, swin_windows_test_acc=swin_acc,
       scores_ratio_swin_t_stage1=(56 * 56) // 49)
