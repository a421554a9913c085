# %% [markdown]
# # 11 · Where is each patch? Position encodings compared on the ViT
#
# Self-attention treats its input as a set: permute the tokens and the output is permuted the same way (lesson 03
# checks it). A ViT with nothing added to its patch tokens therefore sees a bag of patches, and pooling their mean
# throws the order away for good. The ViT paper (Dosovitskiy et al. 2021, Appendix D.4) trained one model with no
# position information and with three ways of adding it: none, learned 1-D (the paper's default), learned 2-D (half
# the channels for the row, half for the column) and relative. The paper found that leaving positions out costs some
# accuracy and that the way of adding them matters little. We replay that ablation on digits, with the original
# Transformer's fixed sinusoids (in reading order, and the 2-D sin-cos of later ViTs) beside the learned ones, then
# cut the same digits into smaller patches to see when a bag of patches stops being enough:
#
# | scheme | what tells a token where it sits (g x g patches, width D, H heads) | learned numbers |
# |---|---|---|
# | `none` | nothing | 0 |
# | `learned` | a learned vector per token, added to it (1-D: the grid is not known) | (1 + g^2) D |
# | `sincos` | the Transformer's fixed sinusoidal table over patches in reading order | 0 |
# | `sincos2d` | fixed: sinusoids of the row in half the channels, of the column in the other half | 0 |
# | `learned2d` | a learned vector per row (D/2) beside a learned vector per column (D/2) | 2 g D/2 |
# | `relative` | in each block, a learned bias per head and offset (dy, dx), added to the scores | blocks H (2g-1)^2 |

# %%
import time

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.datasets import DigitCanvases, batches, random_shifts
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__)
# 8x8 digits upscaled to 16x16 and centred on an 18x18 canvas, cut into 6x6 patches: a 3x3 grid of patches, each
# holding a 3x3-pixel piece of the original digit.
data = DigitCanvases(canvas=18, scale=2, jitter=False)
patch, grid = 6, 3
train, test = data.split["train"], data.split["test"]
if args.quick:
    train = train[:320]
schemes = ["none", "learned", "sincos", "sincos2d", "learned2d", "relative"]


def make_vit(position, image_size=18, patch_size=patch):
    return models.ViT(models.ViTConfig(image_size=image_size, patch_size=patch_size, d_model=64, depth=2, num_heads=4,
                                       mlp_ratio=2, pool="mean", position=position))


bare = make_vit("none").num_parameters()
for position in schemes:
    print(f"{position:10} {make_vit(position).num_parameters() - bare:5,} learned numbers for positions")
print(f"{len(train)} training images, {len(test)} test images: one test image is {100 / len(test):.2f} points")

# %% [markdown]
# ## One recipe for all six
# The recipe of lesson 08, shortened: AdamW with warm-up and cosine decay, shifts of up to 2 pixels, label smoothing
# 0.1, mean pooling over the patch tokens. Same seed, same batches, same steps for every scheme; only the positions
# differ.

# %%
epochs = 2 if args.quick else 80


def accuracy(model, images, rows):
    model.eval()
    with ta.no_grad():
        predictions = model(ta.tensor(images[rows])).numpy().argmax(-1)
    model.train()
    return float((predictions == data.labels[rows]).mean())


def train_vit(position, images=data.images, image_size=18, patch_size=patch):
    ta.manual_seed(args.seed)
    model = make_vit(position, image_size, patch_size)
    optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    total = epochs * -(-len(train) // 64)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(total // 10, total))
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for _ in progress(range(epochs), desc=position):
        for idx in batches(len(train), 64, rng):
            rows = train[idx]
            loss = F.cross_entropy(model(ta.tensor(random_shifts(images[rows], rng))), ta.tensor(data.labels[rows]),
                                   label_smoothing=0.1)
            train_step(loss, optimizer, schedule)
    return model, accuracy(model, images, test), time.perf_counter() - start


trained, test_acc, seconds = {}, {}, {}
for position in schemes:
    trained[position], test_acc[position], seconds[position] = train_vit(position)

# %%
print(f"{'scheme':10} {'test accuracy':>13} {'seconds':>8}" + quick_note(args))
for position in schemes:
    print(f"{position:10} {test_acc[position]:13.3f} {seconds[position]:8.1f}")
with_positions = [p for p in schemes if p != "none"]
mean_with = np.mean([test_acc[p] for p in with_positions])
spread = max(test_acc[p] for p in with_positions) - min(test_acc[p] for p in with_positions)
print(f"the five with positions average {mean_with:.3f}, none {test_acc['none']:.3f} "
      f"({(test_acc['none'] - mean_with) * len(test):+.1f} test images); the five span {spread:.3f} "
      f"({spread * len(test):.0f} test images)")
viz.save(viz.bars({p: test_acc[p] for p in schemes}, ylabel="test accuracy",
                  title=f"ViT on digits, 3x3 patches, one run per position scheme ({epochs} epochs)"),
         plot_path(args, "11_position_ablation.png"))

# %% [markdown]
# Read the numbers above with the test set's size in mind: one run of each, and a difference of a few test images is
# noise until several seeds agree. A model without positions is not helpless here: attention compares the patches'
# contents, and nine 3x3-pixel pieces of a digit, taken as a bag, still say a lot about which digit it is.
#
# ## Smaller patches: when the bag of patches stops being enough
# Cut the same digits finer, into a 4x4 grid of 2x2-pixel pieces (16x16 canvas, 4x4 patches), and train `none` and
# `learned` again with the same recipe. Each piece now holds a fragment of a stroke, and the training shifts of up to
# 2 pixels move the patch boundaries by half a patch, so what a bag of pieces holds changes from step to step while
# their arrangement is what tells a 3 from an 8.

# %%
fine = DigitCanvases(canvas=16, scale=2, jitter=False)
assert np.array_equal(fine.split["test"], test) and np.array_equal(fine.labels, data.labels)    # the same digits
fine_acc = {}
for position in ("none", "learned"):
    _, fine_acc[position], seconds[f"fine {position}"] = train_vit(position, fine.images, image_size=16, patch_size=4)
print(f"4x4 grid of 2x2-pixel pieces: none {fine_acc['none']:.3f}, learned {fine_acc['learned']:.3f} "
      f"(3x3 grid of 3x3-pixel pieces: none {test_acc['none']:.3f}, learned {test_acc['learned']:.3f})")
fine_gap = fine_acc["learned"] - fine_acc["none"]
print(f"leaving positions out costs {test_acc['learned'] - test_acc['none']:.3f} with the larger patches "
      f"and {fine_gap:.3f} with the smaller ones")

# %% [markdown]
# How much a ViT needs its position encoding depends on how much each token carries by itself: the less a patch
# holds, the more of the image lives in the patches' arrangement, and the arrangement is exactly what attention
# without positions cannot see.
#
# ## What the position tables encode
# For the schemes that add a table, compare each position's vector with its neighbour's (cosine similarity): to the
# right (the next token in reading order) and below (three tokens later in reading order). A fixed 1-D table in
# reading order makes a patch more like its right neighbour than like the one below it, by construction; the fixed 2-D
# table treats the two alike; the learned tables become whatever training made of them.

# %%
tables = {p: trained[p].position_table().numpy()[0, 1:] for p in ("learned", "sincos", "sincos2d", "learned2d")}
print(f"{'scheme':10} {'right':>6} {'below':>6} {f'{grid}+ apart':>9}   (mean cosine similarity of position vectors)")
similarity = {}
for position, table in tables.items():
    similarity[position] = models.position_neighbour_similarity(table, grid)
    right, below, far = similarity[position]
    print(f"{position:10} {right:6.2f} {below:6.2f} {far:9.2f}")
viz.save(viz.position_similarity(tables["learned"], (grid, grid), title="learned 1-D: cosine similarity"),
         plot_path(args, "11_learned_1d_similarity.png"))
viz.save(viz.position_similarity(tables["learned2d"], (grid, grid), title="learned 2-D: cosine similarity"),
         plot_path(args, "11_learned_2d_similarity.png"))

# %% [markdown]
# ## What the relative bias learned
# The `relative` model adds table[dy, dx] to the score of a query patch attending to a key patch dy rows and dx
# columns away. Each panel is one head of the first block: the centre is the patch itself, and a red (positive) cell
# is an offset that head prefers whatever the patches hold, a blue one an offset it avoids.

# %%
bias = trained["relative"].relative_bias[0].bias.table.numpy()                  # ((2g-1)^2, heads)
viz.save(viz.relative_bias([bias], grid, ["block 0"]), plot_path(args, "11_relative_bias.png"))
print(f"relative bias, block 0: from {bias.min():.2f} to {bias.max():.2f} "
      f"(a bias of b multiplies that key's softmax weight by e^b)")

# %%
if not args.quick:
    for position in schemes:
        assert test_acc[position] >= 0.9, (position, test_acc[position])
    assert fine_gap >= 0.2, fine_acc
    assert similarity["sincos"][0] > similarity["sincos"][1]       # reading order: right is near, below is far
    assert abs(similarity["sincos2d"][0] - similarity["sincos2d"][1]) < 0.01
report(vit_pe_ablation_acc={p: round(a, 4) for p, a in test_acc.items()},
       vit_pe_small_patches_acc={p: round(a, 4) for p, a in fine_acc.items()},
       position_neighbour_similarity={p: [round(float(v), 3) for v in s] for p, s in similarity.items()},
       seconds=sum(seconds.values()))
