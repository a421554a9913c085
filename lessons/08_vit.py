# %% [markdown]
# # 08 · Vision Transformer: an image is a sequence of patches
#
# Cut the image into patches, flatten each, embed it with one linear layer: now it is a sentence of patch-words.
# Prepend a learned class token, add position embeddings, run Transformer encoder blocks, classify the class
# token (Dosovitskiy et al. 2021). With no convolution, everything about 2-D structure must be learned: we look at
# what the position embeddings learn, where the class token attends, and how far each head looks at each depth.
#
# Data: scikit-learn's bundled 8x8 digits (1,797 images, no download), upscaled to 16x16 and cut into 4x4 patches:
# 16 tokens plus the class token. About 1,260 training images is very little data for a ViT.

# %%
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.data import DigitCanvases, batches
from common import options, plot_path, progress, report

args = options(__doc__)
ta.manual_seed(0)
data = DigitCanvases(canvas=16, scale=2, jitter=False)
print({name: len(rows) for name, rows in data.split.items()}, "images of", data.images.shape[1:])

# %%
config = models.ViTConfig(image_size=16, patch_size=4, in_chans=1, num_classes=10, d_model=64,
                          depth=2 if args.quick else 3, num_heads=4, mlp_ratio=2, pool="mean")
model = models.ViT(config)
print(f"{model.num_parameters():,} parameters, {model.patch_embed.num_patches} patches")

# %% [markdown]
# ## Training
# A ViT has little built-in knowledge of images, so it needs data: we shift each training image by up to 2 pixels
# (a cheap augmentation), smooth the labels (the target puts 0.1 of its mass evenly on all classes, which keeps a
# small model from growing overconfident on so few images), and use AdamW with warm-up and cosine decay. Measured
# over seeds 0-3, label smoothing and 120 epochs instead of 80 raised the test accuracy from 0.93-0.97 to 0.95-0.98.
# How much one run tells: the test split has 270 images, so one image is 0.4%, and the last bits of float32 rounding
# (which change with the number of CPU threads and the BLAS build) send training down a different path. With
# tinyattn's CPU threads the same seeds 0-3 gave 0.944, 0.963, 0.978 and 0.981; the check at the end asks for 0.93,
# below that spread.

# %%
def shifted(images, rng):
    out = np.zeros_like(images)
    for i, (dy, dx) in enumerate(rng.integers(-2, 3, size=(len(images), 2))):
        out[i] = np.roll(images[i], (dy, dx), axis=(1, 2))
    return out


def accuracy(model, rows, batch=256):
    model.eval()
    with ta.no_grad():
        predictions = np.concatenate([model(ta.tensor(data.images[rows[i:i + batch]])).numpy().argmax(-1)
                                      for i in range(0, len(rows), batch)])
    model.train()
    return float((predictions == data.labels[rows]).mean())


epochs, batch_size = (2, 64) if args.quick else (120, 32)
train = data.split["train"]
optimizer = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
total = epochs * -(-len(train) // batch_size)
schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(warmup_steps=total // 10, total_steps=total))
rng = np.random.default_rng(0)
history = []
for epoch in (bar := progress(range(epochs), desc="epochs")):
    for idx in batches(len(train), batch_size, rng):
        rows = train[idx]
        loss = F.cross_entropy(model(ta.tensor(shifted(data.images[rows], rng))), ta.tensor(data.labels[rows]),
                               label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    history.append(accuracy(model, data.split["val"]))
    bar.set_postfix(val_acc=f"{history[-1]:.3f}")
test_acc = accuracy(model, data.split["test"])
print(f"test accuracy {test_acc:.3f}")

# %% [markdown]
# ## Where does the class token look?
# The class token is not used for the prediction here (mean pooling trains faster on so little data), but it still
# attends: the last block's attention from it to each patch, averaged over heads, laid on the image.

# %%
model.eval()
test_rows = data.split["test"][:6]
with ta.no_grad():
    _, maps = model(ta.tensor(data.images[test_rows]), return_attention=True)
grid = model.patch_embed.grid
fig, axes = viz.plt.subplots(1, 6, figsize=(13, 2.6))
cls_to_patches = maps[-1].numpy()[:, :, 0, 1:].mean(1)                     # (images, patches)
for ax, image, weights, label in zip(axes, data.images[test_rows, 0], cls_to_patches, data.labels[test_rows]):
    viz.patch_attention(image, weights, (grid, grid), ax=ax, title=f"label {label}")
viz.save(fig, plot_path(args, "08_vit_class_attention.png"))

# %% [markdown]
# ## What the position embeddings learned
# Each small square shows one patch position's embedding compared (cosine similarity) with every other position's.
# Nobody told the model the patches form a 4x4 grid; whatever structure shows up was learned.

# %%
positions = model.pos_embed.numpy()[0, 1:]
viz.save(viz.position_similarity(positions, (grid, grid)), plot_path(args, "08_vit_positions.png"))
similarity = positions @ positions.T / np.outer(np.linalg.norm(positions, axis=1), np.linalg.norm(positions, axis=1))
neighbour = np.mean([similarity[i, i + 1] for i in range(grid * grid - 1) if (i + 1) % grid])
far = np.mean([similarity[i, j] for i in range(grid * grid) for j in range(grid * grid)
               if abs(i // grid - j // grid) + abs(i % grid - j % grid) >= grid])
print(f"mean cosine similarity: horizontal neighbours {neighbour:.2f}, patches {grid}+ steps apart {far:.2f}")

# %% [markdown]
# ## Mean attention distance
# For each head: the average distance in pixels between a patch and the patches it attends to, weighted by
# attention (the ViT paper's Figure 7, right). Some heads look locally, others globally.

# %%
with ta.no_grad():
    _, maps = model(ta.tensor(data.images[data.split["test"][:128]]), return_attention=True)
distances = np.stack([models.mean_attention_distance(m, grid, config.patch_size) for m in maps])
viz.save(viz.attention_distance(distances), plot_path(args, "08_vit_attention_distance.png"))
for depth, row in enumerate(distances):
    print(f"block {depth}: " + "  ".join(f"{d:4.1f}" for d in row) + " pixels")

# %%
if not args.quick:
    assert test_acc >= 0.93, test_acc
report(vit_test_acc=test_acc, position_neighbour_similarity=float(neighbour), position_far_similarity=float(far),
       parameters=model.num_parameters())
