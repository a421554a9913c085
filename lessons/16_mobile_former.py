# %% [markdown]
# # 16 · Mobile-Former: a CNN and a few global tokens, talking both ways
#
# Mobile-Former (Chen et al. 2022, "Mobile-Former: Bridging MobileNet and Transformer") runs a convolutional branch
# (Mobile) beside a Transformer over a handful of global tokens (Former; M = 4 here, at most 6 in the paper), with
# two bridges of cross-attention in every block:
# - **Mobile -> Former**: the tokens are the queries and attend over every pixel of the feature map; the pixels serve
#   as keys and values as they are, with no projections, which keeps the bridge cheap;
# - **Former -> Mobile**: every pixel is a query (again as it is) and attends over the tokens, whose projections are
#   the keys and values; the result is added to the feature map.
# The tokens do the global part (self-attention among M tokens costs M^2), the convolutions the local part, and each
# bridge costs H*W*M per channel, not the (H*W)^2 of self-attention over pixels.
#
# The convolutional branch here is exactly lesson 09's small CNN, and the Former->Mobile values start at 0, so at
# initialisation Mobile-Former computes what that CNN computes. The CNN is the control; so is a wider CNN with as
# many parameters as Mobile-Former.

# %%
import numpy as np

import tinyattn as ta
from tinyattn import models, viz
from tinyattn.datasets import DigitCanvases
from tinyattn.lesson import options, plot_path, quick_note, report
from tinyattn.lesson_training import accuracy, fit

args = options(__doc__)
data = DigitCanvases(canvas=16, scale=2, jitter=False)
train, test = data.split["train"], data.split["test"]
epochs, lr = (1, 1e-2) if args.quick else (15, 1e-2)
seeds = [args.seed + i for i in range(1 if args.quick else 3)]
if args.quick:
    train = train[:320]

# %% [markdown]
# ## The model, and what its attention costs
# With `need_weights=True` each Mobile->Former bridge keeps its weights, (batch, heads, M tokens, H*W pixels): the
# size of what it computed, against the (H*W)^2 scores per head that self-attention over the same pixels would need.

# %%
ta.manual_seed(args.seed)
config = models.MobileFormerConfig(width=16, num_tokens=4, token_dim=32, num_heads=2)
model = models.MobileFormer(config)
parts = {"Mobile (stem, convolutions, classifier)": [], "Former (tokens, their Transformer blocks)": [],
         "bridges (Mobile->Former, Former->Mobile)": []}
for name, p in model.named_parameters():
    part = ("bridges (Mobile->Former, Former->Mobile)" if "_to_" in name else
            "Former (tokens, their Transformer blocks)" if name.startswith("tokens") or ".former." in name else
            "Mobile (stem, convolutions, classifier)")
    parts[part].append(p.numel())
for part, sizes in parts.items():
    print(f"{part:42} {sum(sizes):7,} parameters")
with ta.no_grad():
    model(ta.tensor(data.images[:1]), need_weights=True)
for i, block in enumerate(model.blocks):
    weights = block.mobile_to_former.last_weights
    heads, tokens, pixels = weights.shape[1:]
    print(f"block {i}: Mobile->Former weights {tuple(weights.shape)}: {tokens * pixels} scores per head, "
          f"against {pixels ** 2} for self-attention over the {pixels} pixels ({pixels // tokens}x fewer)")
    assert (tokens, pixels) == (config.num_tokens, (16 // 2 ** i) ** 2)      # M tokens by the block's input map
# The paper's sizes: a 224x224 image, its first feature map at stride 4 (56x56 pixels), M = 6 tokens.
pixels = (224 // 4) ** 2
print(f"at 224x224, stride 4: {6 * pixels:,} scores per head against {pixels ** 2:,} ({pixels // 6}x fewer)")

# %% [markdown]
# ## Training, against the CNN alone and a CNN as large
# Same recipe for all (AdamW, warm-up and cosine decay, the same epochs and learning rate: `fit` of
# tinyattn/lesson_training.py, which lesson 15 uses too), three seeds each.

# %%
matched_width = 27              # SmallCNN's parameters grow as width^2: 27 comes closest to Mobile-Former's
builders = {
    "Mobile-Former": lambda: models.MobileFormer(config),
    "CNN alone (its Mobile branch)": lambda: models.SmallCNN(models.CNNConfig(width=16)),
    f"CNN, width {matched_width}": lambda: models.SmallCNN(models.CNNConfig(width=matched_width)),
}
results, kept = {}, {}
for name, build in builders.items():
    for seed in seeds:
        ta.manual_seed(seed)
        net = build()
        seconds = fit(net, data.images[train], data.labels[train], epochs, lr, seed=args.seed, desc=f"{name}, seed {seed}")
        row = {"acc": accuracy(net, data.images[test], data.labels[test]), "seconds": seconds, "params": net.num_parameters()}
        if name == "Mobile-Former":
            row["acc_cut"] = accuracy(net, data.images[test], data.labels[test], former_to_mobile=False)
        results.setdefault(name, []).append(row)
        kept.setdefault(name, net)

# %%
print(f"{'model':30} {'params':>7} {'test accuracy per seed':>24} {'mean':>6} {'seconds':>8}" + quick_note(args))
mean = {}
for name, rows in results.items():
    mean[name] = float(np.mean([r["acc"] for r in rows]))
    accs = " ".join(f"{r['acc']:.3f}" for r in rows)
    print(f"{name:30} {rows[0]['params']:7,} {accs:>24} {mean[name]:6.3f} {np.mean([r['seconds'] for r in rows]):8.1f}")
spread = max(max(r["acc"] for r in rows) - min(r["acc"] for r in rows) for rows in results.values())
for name in list(results)[1:]:
    diff = mean["Mobile-Former"] - mean[name]
    judged = ("from one seed each: no spread to judge it by" if spread == 0 else
              f"{'within' if abs(diff) <= spread else 'beyond'} the largest spread between seeds of one model "
              f"({spread:.3f})")
    print(f"Mobile-Former against {name}: {diff:+.3f}, {judged}")

# %% [markdown]
# ## Does the CNN branch use the tokens?
# Run the trained Mobile-Former with its Former->Mobile bridges cut (the same weights; the convolutions get nothing
# from the tokens). Had the branch learned to ignore the tokens, the accuracy would stay where it was.

# %%
cut = [r["acc_cut"] for r in results["Mobile-Former"]]
intact = [r["acc"] for r in results["Mobile-Former"]]
print("Mobile-Former test accuracy per seed, bridges intact:", " ".join(f"{a:.3f}" for a in intact),
      "| Former->Mobile cut:", " ".join(f"{a:.3f}" for a in cut))

# %% [markdown]
# ## Where the tokens look
# Mobile->Former weights of the first block, averaged over its heads: for each of the 4 tokens, its attention over the
# 16x16 feature map of a few test digits. Do the tokens look at different things? The total-variation distance
# between two tokens' weights, half the sum of their absolute differences, is 0 for the same weights and 1 for weights
# on disjoint pixels.

# %%
mobile_former = kept["Mobile-Former"]
mobile_former.eval()
shown = test[:5]
with ta.no_grad():
    mobile_former(ta.tensor(data.images[shown]), need_weights=True)
looks = mobile_former.blocks[0].mobile_to_former.last_weights.numpy().mean(1)       # (5, M, 256)
pairs = [(a, b) for a in range(config.num_tokens) for b in range(a + 1, config.num_tokens)]
distance = [0.5 * float(np.abs(looks[:, a] - looks[:, b]).sum(-1).mean()) for a, b in pairs]
print("total-variation distance between tokens' weights, every pair of tokens, mean over the digits shown:",
      " ".join(f"{d:.2f}" for d in distance))
fig, axes = viz.plt.subplots(config.num_tokens + 1, len(shown), figsize=(1.4 * len(shown) + 1, 1.35 * 5 + 0.4))
for column, row in enumerate(shown):
    axes[0, column].imshow(data.images[row, 0], cmap="gray")
    axes[0, column].set_title(f"label {data.labels[row]}", fontsize=9)
    for token in range(config.num_tokens):
        image = axes[token + 1, column].imshow(looks[column, token].reshape(16, 16), cmap="viridis", vmin=0,
                                               vmax=looks.max())
for token in range(config.num_tokens):
    axes[token + 1, 0].set_ylabel(f"token {token}", fontsize=8)
for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
fig.colorbar(image, ax=list(axes[1:].flat), shrink=0.6)
fig.suptitle("Mobile->Former, first block: each token's attention over the pixels", fontsize=10)
viz.save(fig, plot_path(args, "16_mobile_former_tokens.png"))

fig, ax = viz.plt.subplots(figsize=(5.6, 3))
labels = list(results) + ["Mobile-Former,\nFormer->Mobile cut"]
values = [[r["acc"] for r in rows] for rows in results.values()] + [cut]
for i, accs in enumerate(values):
    ax.bar(i, np.mean(accs), color="0.8")
    ax.scatter(np.full(len(accs), i), accs, color="k", s=14, zorder=3)
ax.set_xticks(range(len(labels)), labels=[label.replace(" (", "\n(").replace(", w", ",\nw") for label in labels],
              fontsize=8)
ax.set_ylim(0, 1)
ax.set_ylabel("test accuracy")
ax.set_title(f"digits 16x16, {epochs} epochs: mean (bar) and each seed (dot)", fontsize=10)
viz.save(fig, plot_path(args, "16_mobile_former_accuracy.png"))

# %%
if not args.quick:
    assert min(r["acc"] for r in results["Mobile-Former"]) >= 0.9, results["Mobile-Former"]
report(mobile_former_acc=mean["Mobile-Former"], mobile_branch_alone_acc=mean["CNN alone (its Mobile branch)"],
       cnn_matched_params_acc=mean[f"CNN, width {matched_width}"], mobile_former_cut_acc=float(np.mean(cut)),
       mobile_former_params=results["Mobile-Former"][0]["params"], seeds=len(seeds))
