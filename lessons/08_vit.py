# %% [markdown]
# # 08 · Vision Transformer: an image is a sequence of patches
#
# Cut the image into patches, flatten each, embed it with one linear layer: now it is a sentence of patch-words.
# Prepend a learned class token, add position embeddings, run Transformer encoder blocks, and classify (Dosovitskiy
# et al. 2021). The paper classifies the class token's final state and notes that the mean of the patch tokens'
# final states (global average pooling) serves as well; this lesson's model classifies that mean (`pool="mean"`),
# and its class token still attends without being read. With no convolution, everything about 2-D structure must
# be learned: we look at what the position embeddings learn, where the class token attends (in the last block, and
# rolled out through all of them), and how far each head looks at each depth.
#
# Data: scikit-learn's bundled 8x8 digits (1,797 images, no download), upscaled to 16x16 and cut into 4x4 patches:
# 16 tokens plus the class token. About 1,260 training images is very little data for a ViT.

# %%
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import interpret, models, optim, viz
from tinyattn.datasets import DigitCanvases, batches, random_shifts
from tinyattn.lesson import from_pretrained, options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step
from tinyattn.preprocessing import ImageProcessor

args = options(__doc__, [("--weights", dict(default=None, help="meet a real ViT at the end: a hub name "
                                                                 "(google/vit-base-patch16-224, needs the hub extra) "
                                                                 "or a folder of its files"))])
if args.weights is not None:           # read first, so a missing file or network stops the run before training
    real_vit, processor = from_pretrained(args.weights, models.ViT, ImageProcessor)
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
# small model from growing overconfident on so few images), and use AdamW with warm-up and cosine decay. How much one
# run tells: the test split is small (its size is printed below), and the last bits of float32 rounding (which
# change with the number of CPU threads and the BLAS build) send training down a different path, so the same seed
# can land elsewhere on another machine; the check at the end asks for 0.93.
#
# Exercise: cross-entropy with label smoothing, forward and backward: `lessons/exercises/label_smoothing.py`
# (`python -m lessons check label_smoothing`).

# %%
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
rng = np.random.default_rng(args.seed)
history = []
for epoch in (bar := progress(range(epochs), desc="epochs")):
    for idx in batches(len(train), batch_size, rng):
        rows = train[idx]
        loss = F.cross_entropy(model(ta.tensor(random_shifts(data.images[rows], rng))), ta.tensor(data.labels[rows]),
                               label_smoothing=0.1)
        train_step(loss, optimizer, schedule)
    history.append(accuracy(model, data.split["val"]))
    bar.set_postfix(val_acc=f"{history[-1]:.3f}")
test_acc = accuracy(model, data.split["test"])
print(f"test accuracy {test_acc:.3f} on {len(data.split['test'])} images (one image is "
      f"{100 / len(data.split['test']):.2f} points)" + quick_note(args))

# %% [markdown]
# ## Where does the class token look?
# The class token is not read by the classifier here (mean pooling), but it still attends: the last block's
# attention from it to each patch, averaged over heads, laid on the image (top row).
#
# That is one block's view. The tokens the last block reads are themselves mixtures that earlier blocks made, and
# each block also passes every token on unchanged through its residual connection. Attention rollout (Abnar and
# Zuidema 2020) follows the mixing down to the patches: per block, the heads' mean attention with the identity added
# for the residual, rows renormalised to sum to 1; then the product over blocks, the last block's matrix on the left.
# Its class-token row (bottom row) says how much of the class token's final state comes from each input patch, and
# how much from the class token's own input.

# %%
model.eval()
test_rows = data.split["test"][:6]
with ta.no_grad():
    _, maps = model(ta.tensor(data.images[test_rows]), return_attention=True)
grid = model.patch_embed.grid
rollout = interpret.attention_rollout(maps)                                  # (images, 1 + patches, 1 + patches)
assert np.allclose(rollout.sum(-1), 1.0)
fig, axes = viz.plt.subplots(2, 6, figsize=(14, 5), layout="constrained")
cls_to_patches = maps[-1].numpy()[:, :, 0, 1:].mean(1)                     # (images, patches)
for column, (image, label) in enumerate(zip(data.images[test_rows, 0], data.labels[test_rows])):
    viz.patch_attention(image, cls_to_patches[column], (grid, grid), ax=axes[0, column],
                        title=f"label {label}: last block")
    viz.patch_attention(image, rollout[column, 0, 1:], (grid, grid), ax=axes[1, column], title="rollout")
viz.save(fig, plot_path(args, "08_vit_class_attention.png"))
print(f"the class token's rollout keeps {rollout[:, 0, 0].mean():.2f} of its final state from its own input "
      f"(mean over {len(test_rows)} images); the last block alone puts {maps[-1].numpy()[:, :, 0, 0].mean():.2f} "
      "of its attention on it")

# %% [markdown]
# The first test image, to explore: pick a block and a head (or their mean, or rollout), and hover a patch to see
# where that patch looks instead of the class token. One HTML file, no server and no network needed.

# %%
viz.save(viz.patch_attention_html(data.images[test_rows[0], 0], [m.numpy()[:1] for m in maps], (grid, grid),
                                  rollout=rollout[0]), plot_path(args, "08_vit_attention_view.html"))

# %% [markdown]
# ## What the position embeddings learned
# Each small square shows one patch position's embedding compared (cosine similarity) with every other position's.
# Nobody told the model the patches form a 4x4 grid; whatever structure shows up was learned.

# %%
positions = model.pos_embed.numpy()[0, 1:]
viz.save(viz.position_similarity(positions, (grid, grid)), plot_path(args, "08_vit_positions.png"))
neighbour, below, far = models.position_neighbour_similarity(positions, grid)
print(f"mean cosine similarity: right neighbours {neighbour:.2f}, neighbours below {below:.2f}, patches {grid}+ steps "
      f"apart {far:.2f}")

# %% [markdown]
# ## Mean attention distance
# For each head: the average distance in pixels between a patch and the patches it attends to, weighted by
# attention (the ViT paper's Figure 7, right, where ViT-L/16 has a 14x14 grid and its early heads range from local to
# global). What a 4x4 grid of 4-pixel patches allows: 0 pixels if every patch attends only to itself, the mean
# distance to the farthest patch if every patch attends only to that one, and in between the value of attention
# spread evenly over all patches, which is where a head that has learned no preference for near or far sits.

# %%
ys, xs = np.divmod(np.arange(grid * grid), grid)
pixel_distance = config.patch_size * np.hypot(ys[:, None] - ys[None, :], xs[:, None] - xs[None, :])   # (N, N)
uniform = float(pixel_distance.mean())
farthest = float(pixel_distance.max(axis=1).mean())
even = np.ones((1, 1, 1 + grid * grid, 1 + grid * grid))
assert abs(models.mean_attention_distance(even, grid, config.patch_size)[0] - uniform) < 1e-9
print(f"the grid allows 0.0 (each patch on itself) to {farthest:.1f} pixels (each on its farthest patch); "
      f"uniform attention: {uniform:.1f}")
with ta.no_grad():
    _, maps = model(ta.tensor(data.images[data.split["test"][:128]]), return_attention=True)
distances = np.stack([models.mean_attention_distance(m, grid, config.patch_size) for m in maps])
viz.save(viz.attention_distance(distances, uniform=uniform, limits=(0, farthest)),
         plot_path(args, "08_vit_attention_distance.png"))
for depth, row in enumerate(distances):
    print(f"block {depth}: " + "  ".join(f"{d:4.1f}" for d in row) + " pixels")
departure = float(np.abs(distances - uniform).max())
print(f"the head farthest from uniform attention is {departure:.1f} pixels from it, "
      f"{departure / farthest:.0%} of the range the grid allows")

# %% [markdown]
# ## A real ViT
# `models.ViT.from_pretrained("google/vit-base-patch16-224")` reads Hugging Face's ViT-Base/16 (12 blocks, 12 heads,
# 196 patches of 16x16 pixels, fine-tuned on ImageNet's 1,000 classes) into the class trained above, translating
# its names in one place (tinyattn/models/hf_vit.py); `preprocessing.ImageProcessor` prepares an image as it was trained
# (resize to 224x224, scale to [0, 1], normalise). Run with `--weights google/vit-base-patch16-224` (after
# `pip install -e ".[hub]"`; 346 MB, downloaded once) or `--weights FOLDER`. It classifies matplotlib's own sample
# photo (shipped with matplotlib, no download) and shows where the class token looks in each block.

# %%
top_classes = None
if args.weights is None:
    print("no real ViT loaded. To meet one: pip install -e \".[hub]\" && python -m lessons 08 "
          "--weights google/vit-base-patch16-224")
else:
    import matplotlib.cbook
    photo = viz.plt.imread(matplotlib.cbook.get_sample_data("grace_hopper.jpg"))            # (H, W, 3) uint8
    pixels = processor(photo)
    with ta.no_grad():
        logits, real_maps = real_vit(ta.tensor(pixels), return_attention=True)
    probabilities = F.softmax(logits, dim=-1).numpy()[0]
    names = real_vit.config.id2label or {}
    top_classes = [(names.get(int(i), str(i)), float(probabilities[i])) for i in probabilities.argsort()[::-1][:5]]
    print("matplotlib's sample photo (grace_hopper.jpg), top 5:",
          ", ".join(f"{name} {p:.2f}" for name, p in top_classes))
    shown = np.clip(pixels[0].transpose(1, 2, 0) * processor.image_std + processor.image_mean, 0, 1)
    real_grid = real_vit.patch_embed.grid
    real_rollout = interpret.attention_rollout(real_maps)[0, 0, 1:]
    blocks = len(real_maps)
    fig, axes = viz.plt.subplots(1, blocks + 1, figsize=(2.2 * (blocks + 1), 2.6), layout="constrained")
    for b, m in enumerate(real_maps):
        viz.patch_attention(shown, m.numpy()[0, :, 0, 1:].mean(0), (real_grid, real_grid), ax=axes[b],
                            title=f"block {b}", colorbar=False)
    viz.patch_attention(shown, real_rollout, (real_grid, real_grid), ax=axes[-1], title="rollout", colorbar=False)
    viz.save(fig, plot_path(args, "08_vit_pretrained_class_attention.png"))

# %%
if not args.quick:
    assert test_acc >= 0.93, test_acc
report(vit_test_acc=test_acc, position_neighbour_similarity=float(neighbour), position_far_similarity=float(far),
       parameters=model.num_parameters(), uniform_attention_distance=uniform,
       head_distances=[[round(float(d), 2) for d in row] for row in distances],
       **({} if top_classes is None else {"pretrained_top_class": top_classes[0][0],
                                          "pretrained_top_probability": top_classes[0][1]}))
