# %% [markdown]
# # 09 · Beyond ViT: shifted windows, and no attention at all
#
# Two answers to "ViTs need a lot of data and compute" (a third, DeiT's distillation from a CNN teacher, is lesson
# 14, beside the plain ViT it has to beat):
# - **Swin** (Liu et al. 2021) attends only within local windows, shifted every other block, and merges patches
#   between stages: a hierarchy like a CNN's, with cost linear in image area.
# - **MLP-Mixer** (Tolstikhin et al. 2021) drops attention: an MLP mixes across patches, another across channels.
#
# Both train on scikit-learn's 8x8 digits upscaled to 16x16, against a small CNN.

# %%
import time

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, optim, viz
from tinyattn.datasets import DigitCanvases, batches
from tinyattn.lesson import options, plot_path, progress, quick_note, report
from tinyattn.lesson_training import train_step

args = options(__doc__)                 # also seeds tinyattn's generator: --seed N
data = DigitCanvases(canvas=16, scale=2, jitter=False)
train, val, test = data.split["train"], data.split["val"], data.split["test"]
epochs = 2 if args.quick else 20
if args.quick:
    train = train[:320]


def accuracy(model, rows):
    model.eval()
    with ta.no_grad():
        logits = model(ta.tensor(data.images[rows]))
    model.train()
    return float((logits.numpy().argmax(-1) == data.labels[rows]).mean())


def fit(model, name, lr=2e-3, epochs=epochs):
    """AdamW with warm-up and cosine decay over `epochs`; returns test accuracy, validation curve, seconds."""
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    total = epochs * -(-len(train) // 64)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(total // 10, total))
    rng = np.random.default_rng(args.seed)
    curve, start = [], time.perf_counter()
    for _ in progress(range(epochs), desc=name):
        for idx in batches(len(train), 64, rng):
            rows = train[idx]
            loss = F.cross_entropy(model(ta.tensor(data.images[rows])), ta.tensor(data.labels[rows]))
            train_step(loss, optimizer, schedule)
        curve.append(accuracy(model, val))
    return accuracy(model, test), curve, time.perf_counter() - start

# %% [markdown]
# ## The CNN baseline

# %%
ta.manual_seed(args.seed)              # each model starts from the same seed, whichever models trained before it
cnn = models.SmallCNN(models.CNNConfig(width=16))
results = {"CNN": fit(cnn, "CNN", lr=1e-2)}

# %% [markdown]
# ## Swin: windows of 4x4 patches, shifted by 2 in every second block, merged between stages

# %%
ta.manual_seed(args.seed)
swin = models.Swin(models.SwinConfig(image_size=16, patch_size=2, embed_dim=32, depths=(2, 2), num_heads=(2, 4),
                                     window_size=4))
results["Swin"] = fit(swin, "Swin", lr=5e-3, epochs=epochs * 3 // 2)       # windows learn more slowly

# %% [markdown]
# ## MLP-Mixer: no attention

# %%
ta.manual_seed(args.seed)
mixer = models.MLPMixer(models.MixerConfig(image_size=16, patch_size=4, d_model=64, depth=4, token_hidden=32,
                                           channel_hidden=128))
results["Mixer"] = fit(mixer, "Mixer", epochs=epochs * 3 // 5)          # mixes fast: fewer epochs

# %%
for name, model in (("CNN", cnn), ("Swin", swin), ("Mixer", mixer)):
    acc, _, seconds = results[name]
    print(f"{name:6} test accuracy {acc:.3f}   {model.num_parameters():7,} parameters   {seconds:5.1f} s"
          + quick_note(args))
viz.save(viz.curves({name: r[1] for name, r in results.items()}, xlabel="epoch", ylabel="validation accuracy",
                    title="validation accuracy per epoch, digits at 16x16"), plot_path(args, "09_beyond_vit.png"))

# %%
if not args.quick:
    # Swin's accuracy moves with the seed more than the test set can settle: over seeds 0-4 it gave 0.893-0.922, and
    # one image of the 270 is 0.004 (a standard error of 0.018 near 0.9); the CNN and the Mixer stayed above 0.95
    for name, least in (("CNN", 0.9), ("Swin", 0.85), ("Mixer", 0.9)):
        assert results[name][0] >= least, (name, results[name][0])
report(cnn_test_acc=results["CNN"][0], swin_test_acc=results["Swin"][0], mixer_test_acc=results["Mixer"][0])
