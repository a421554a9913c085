# %% [markdown]
# # 12 · A ViT at a new resolution: interpolating the position embeddings
#
# Attention does not care how many tokens it gets: a ViT trained on a 4x4 grid of patches runs on a 6x6 grid as it
# is, with the same weights, the way a CNN runs on a larger image. What does not fit is the table of learned position
# embeddings: it holds one vector per patch of the old grid. The ViT paper's answer (Dosovitskiy et al. 2021, section
# 3.2, "Fine-tuning and higher resolution") is to treat the table as a small image with D channels and resize it by
# 2-D interpolation; they then fine-tune at the higher resolution. Testing at another resolution than training's
# changes how large things look to the model, and costs accuracy until it is adapted (FixRes: Touvron et al. 2019,
# "Fixing the train-test resolution discrepancy").
#
# Here: train a ViT on digits at 16x16 pixels (4x4 patches of 4x4 pixels), then show it the same test digits at
# 24x24 and 32x32 (grids of 6x6 and 8x8 patches, same patch size), with the position table interpolated by
# `nn.interpolate_pos_embed`, and without.

# %%
import time

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, nn, optim, viz
from tinyattn.datasets import DigitCanvases, batches, random_shifts
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__)                 # also seeds tinyattn's generator: --seed N
patch = 4
scales = {16: 2, 24: 3, 32: 4}                       # image side -> how many pixels each of the 8x8 digit's pixels gets
data = {side: DigitCanvases(canvas=side, scale=s, jitter=False) for side, s in scales.items()}
train, test = data[16].split["train"], data[16].split["test"]
assert all((d.split["test"] == test).all() for d in data.values())      # the same digits at every size
if args.quick:
    train = train[:320]
model = models.ViT(models.ViTConfig(image_size=16, patch_size=patch, d_model=64, depth=2, num_heads=4, mlp_ratio=2,
                                    pool="mean", position="learned"))
print(f"{model.num_parameters():,} parameters; position table {tuple(model.pos_embed.shape)}: the class token and "
      f"{model.patch_embed.num_patches} patches")

# %% [markdown]
# ## Training at 16x16
# The recipe of lesson 11: AdamW, warm-up and cosine decay, shifts of up to 2 pixels, label smoothing 0.1.

# %%
epochs = 2 if args.quick else 80


def accuracy(side, rows=test):
    model.eval()
    with ta.no_grad():
        predictions = model(ta.tensor(data[side].images[rows])).numpy().argmax(-1)
    model.train()
    return float((predictions == data[side].labels[rows]).mean())


def fit(side, epochs, lr):
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    total = epochs * -(-len(train) // 64)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(total // 10, total))
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for _ in progress(range(epochs), desc=f"{side}x{side}"):
        for idx in batches(len(train), 64, rng):
            rows = train[idx]
            images = random_shifts(data[side].images[rows], rng)
            loss = F.cross_entropy(model(ta.tensor(images)), ta.tensor(data[side].labels[rows]), label_smoothing=0.1)
            train_step(loss, optimizer, schedule)
    return time.perf_counter() - start


seconds = fit(16, epochs, 3e-3)
trained_table = model.pos_embed
train_res_acc = accuracy(16)
print(f"test accuracy at 16x16, the training size: {train_res_acc:.3f} ({seconds:.0f} s)" + quick_note(args))

# %% [markdown]
# ## Three ways to give a larger grid its positions
# - **interpolated**: the 16 patch vectors laid out as a 4x4 image with 64 channels, resized bilinearly to the new
#   grid (`nn.interpolate_pos_embed`); the class token keeps its vector. A patch of the new grid gets the position
#   vector of the place it covers in the old one.
# - **without, none**: the class token keeps its vector; the patches get no position at all.
# - **without, in reading order**: the table read as a 1-D list, as a language model would read it: patch k of the
#   new grid gets old vector k (so the old second row now sits in the top row), and patches past the 16th get none.

# %%
def positions_for(grid, how):
    table = trained_table.numpy()                                              # (1, 1 + 16, D)
    if how == "interpolated":
        return nn.interpolate_pos_embed(trained_table, 4, grid, num_prefix_tokens=1)
    new = np.zeros((1, 1 + grid * grid, table.shape[-1]), dtype=table.dtype)
    new[:, 0] = table[:, 0]                                                    # the class token's own vector
    if how == "reading order":
        new[:, 1:table.shape[1]] = table[:, 1:]
    return nn.Parameter(ta.tensor(new))


ways = ["interpolated", "none", "reading order"]
results = {}
for side in (24, 32):
    results[side] = {}
    for how in ways:
        model.pos_embed = positions_for(side // patch, how)
        results[side][how] = accuracy(side)
model.pos_embed = trained_table
print(f"{'image':>7} {'grid':>5} " + " ".join(f"{w:>14}" for w in ways))
print(f"{'16x16':>7} {'4x4':>5} the table as trained: {train_res_acc:.3f}")
for side in (24, 32):
    size, grid = f"{side}x{side}", f"{side // patch}x{side // patch}"
    print(f"{size:>7} {grid:>5} " + " ".join(f"{results[side][w]:14.3f}" for w in ways))
interpolated_acc = results[24]["interpolated"]
without_acc = max(results[24]["none"], results[24]["reading order"])          # the better of the two without
print(f"at 24x24: interpolated {interpolated_acc:.3f}, the better one without {without_acc:.3f}")
viz.save(viz.bars({f"{side}x{side}": [results[side][w] for w in ways] for side in (24, 32)}, group_labels=ways,
                  ylabel="test accuracy", hlines={f"16x16, the training size ({train_res_acc:.3f})": train_res_acc},
                  title="ViT trained at 16x16, tested at larger sizes without fine-tuning"),
         plot_path(args, "12_new_resolution.png"))

# %% [markdown]
# Read the table: without interpolation the patches get positions that mean nothing at the new size, and a model
# that learned to read digits through its positions fails (lesson 11's 4x4 grid of small patches, this same
# configuration, measured how much it leans on them).
# Interpolated, each patch is told roughly where in the digit it sits. How well the 16x16 weights then read a larger
# image depends on how far the patches' contents moved from training: at 24x24 a 4x4 patch holds 1.3 x 1.3 of the
# digit's original pixels instead of 2 x 2, at 32x32 only 1 x 1. That a larger change of resolution costs more
# accuracy is the last row; the paper fine-tunes at the new size, below.
#
# ## What interpolation did to the table
# Four of the 64 channels of the learned table, as the 4x4 image of training and the 6x6 image interpolated from it.

# %%
channels = np.argsort(-np.abs(trained_table.numpy()[0, 1:]).std(0))[:4]        # the four channels that vary most
old = trained_table.numpy()[0, 1:].reshape(4, 4, -1)
new = positions_for(6, "interpolated").numpy()[0, 1:].reshape(6, 6, -1)
fig, axes = viz.plt.subplots(2, 4, figsize=(9, 4.6), layout="constrained")
for col, channel in enumerate(channels):
    limit = np.abs(old[..., channel]).max()
    for row, (grid_table, name) in enumerate(((old, f"channel {channel}\ntrained, 4x4"), (new, "interpolated, 6x6"))):
        ax = axes[row, col]
        image = ax.imshow(grid_table[..., channel], cmap="coolwarm", vmin=-limit, vmax=limit)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(name, fontsize=9)
    fig.colorbar(image, ax=axes[:, col].tolist(), fraction=0.05, shrink=0.8).ax.tick_params(labelsize=viz.TICK_SIZE)
viz.save(fig, plot_path(args, "12_interpolated_table.png"))

# %% [markdown]
# ## Fine-tuning at the new size
# The ViT paper fine-tunes after interpolating. A few epochs at 24x24 starting from the interpolated table, against
# the same epochs starting from a fresh random table (what one would do without interpolation): the rest of the
# weights start from the 16x16 model both times.

# %%
finetune_epochs = 1 if args.quick else 5
trained_state = {name: p.array.copy() for name, p in model.named_parameters()}
finetuned = {}
for start in ("interpolated", "fresh table"):
    model.pos_embed = trained_table
    for name, p in model.named_parameters():                                   # back to the 16x16 model
        p.array[...] = trained_state[name]
    if start == "interpolated":
        model.pos_embed = positions_for(6, "interpolated")
    else:
        ta.manual_seed(args.seed + 1)
        model.pos_embed = nn.init.trunc_normal_(nn.Parameter(ta.zeros(1, 1 + 36, 64)), std=0.02)
    fit(24, finetune_epochs, 1e-3)
    finetuned[start] = accuracy(24)
    print(f"fine-tuned {finetune_epochs} epochs at 24x24 from the {start}: test accuracy {finetuned[start]:.3f}")

# %%
if not args.quick:
    assert train_res_acc >= 0.9, train_res_acc
    assert interpolated_acc >= 0.9 and interpolated_acc > without_acc + 0.3, results
    assert results[32]["interpolated"] < interpolated_acc, results
    assert finetuned["interpolated"] >= finetuned["fresh table"], finetuned
report(vit_new_resolution_acc_interpolated=interpolated_acc, vit_new_resolution_acc_without=without_acc,
       vit_train_resolution_acc=train_res_acc,
       vit_new_resolution_by_size={f"{side}x{side}": {w: round(a, 4) for w, a in row.items()}
                                   for side, row in results.items()},
       vit_new_resolution_finetuned={k: round(v, 4) for k, v in finetuned.items()})
