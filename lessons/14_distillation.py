# %% [markdown]
# # 14 · DeiT: a ViT taught by a CNN, against the same ViT taught by labels alone
#
# A ViT has no built-in notion that nearby pixels belong together, so on little data it learns slowly (lesson 08).
# DeiT (Touvron et al. 2021, section 4, "Distillation through attention") lets a trained CNN pass its own knowledge
# of images on as targets, through a second learned token beside the class token, the **distillation token**: the
# class token's head learns the labels, the distillation token's head learns the teacher, and at test time the two
# heads' logits are averaged.
# Two ways of learning from the teacher, with the teacher's logits Z_t, the student's Z_s and the labels y:
# - **soft** (Hinton et al. 2015): (1 - a) CE(Z_s, y) + a T^2 KL(softmax(Z_t / T) || softmax(Z_s / T)). The
#   temperature T > 1 flattens the teacher's distribution so that its second and third choices, how much a 4 looks
#   like a 9, carry weight; T^2 keeps the gradient's size independent of T.
# - **hard** (DeiT's own): 1/2 CE(Z_s, y) + 1/2 CE(Z_s', argmax Z_t): the teacher's top class as a second label.
#
# The question DeiT's comparison leaves to be checked: does a student taught by the CNN beat the same ViT trained on
# the labels alone, with the same recipe and the same number of steps? Three students, each from two seeds.

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
data = DigitCanvases(canvas=16, scale=2, jitter=False)
train, test = data.split["train"], data.split["test"]
if args.quick:
    train = train[:320]
epochs = 2 if args.quick else 40
seeds = [args.seed + i for i in range(1 if args.quick else 2)]


def accuracy(model, rows=test):
    model.eval()
    with ta.no_grad():
        predictions = model(ta.tensor(data.images[rows])).numpy().argmax(-1)
    model.train()
    return float((predictions == data.labels[rows]).mean())


def fit(model, loss_fn, epochs, lr, seed, label, augment=True):
    """AdamW with warm-up and cosine decay, batches of 64, images shifted by up to 2 pixels when augment is set."""
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    total = epochs * -(-len(train) // 64)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(total // 10, total))
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in progress(range(epochs), desc=label):
        for idx in batches(len(train), 64, rng):
            rows = train[idx]
            images = random_shifts(data.images[rows], rng) if augment else data.images[rows]
            loss = loss_fn(ta.tensor(images), ta.tensor(data.labels[rows]))
            train_step(loss, optimizer, schedule)
    return time.perf_counter() - start

# %% [markdown]
# ## The teacher
# A small CNN (three 3x3 convolutions and a global mean): convolution's locality and weight sharing are the
# knowledge the ViT lacks. Trained once, then frozen; its training is not counted in the students' budget.

# %%
ta.manual_seed(args.seed)
teacher = models.SmallCNN(models.CNNConfig(width=32))
teacher_seconds = fit(teacher, lambda x, y: F.cross_entropy(teacher(x), y), epochs, 1e-2, seed=args.seed,
                      label="CNN teacher", augment=False)
teacher.eval()
teacher_acc = accuracy(teacher)
with ta.no_grad():
    shifted_logits = teacher(ta.tensor(random_shifts(data.images[train], np.random.default_rng(args.seed + 2))))
soft = ta.softmax(shifted_logits * (1 / 3.0), dim=-1).numpy()                  # at the temperature used below
right = soft.argmax(-1) == data.labels[train]
true_class_weight = float(soft[~right, data.labels[train][~right]].mean()) if (~right).any() else float("nan")
print(f"CNN teacher: test accuracy {teacher_acc:.3f}, {teacher.num_parameters():,} parameters, "
      f"{teacher_seconds:.0f} s")
print(f"its top class equals the true label on {accuracy(teacher, train):.3f} of the training images, and on "
      f"{right.mean():.3f} of them shifted as the students will see them")
print(f"where it is wrong on a shifted image, its distribution at T = 3 still gives the true class "
      f"{true_class_weight:.2f} on average (1/10 would be no information)")

# %% [markdown]
# ## Three students, one recipe
# The same ViT (2 blocks, width 64, 4x4 patches of 4x4 pixels), the same optimiser, schedule, shifts, epochs and
# batches. The plain ViT classifies its class token; the DeiT students add the distillation token and its head,
# and ask the frozen teacher about every shifted batch they see.

# %%
def make_student(distillation):
    return models.ViT(models.ViTConfig(image_size=16, patch_size=4, d_model=64, depth=2, num_heads=4, mlp_ratio=2,
                                       pool="cls", distillation=distillation))


def train_student(kind, seed):
    ta.manual_seed(seed)
    student = make_student(distillation=kind != "plain ViT")

    def loss_fn(images, labels):
        if kind == "plain ViT":
            return F.cross_entropy(student(images), labels)
        with ta.no_grad():
            teacher_logits = teacher(images)
        class_logits, dist_logits = student(images)
        if kind == "DeiT hard":
            return models.deit_hard_distillation_loss(class_logits, dist_logits, labels, teacher_logits)
        return models.deit_soft_distillation_loss(class_logits, dist_logits, labels, teacher_logits, temperature=3.0,
                                                  alpha=0.5)

    seconds = fit(student, loss_fn, epochs, 3e-3, seed, label=f"{kind}, seed {seed}")
    return student, accuracy(student), seconds


kinds = ["plain ViT", "DeiT hard", "DeiT soft"]
acc = {kind: [] for kind in kinds}
seconds = {kind: [] for kind in kinds}
students = {}
for seed in seeds:
    for kind in kinds:
        students[kind], a, s = train_student(kind, seed)
        acc[kind].append(a)
        seconds[kind].append(s)
mean = {kind: float(np.mean(acc[kind])) for kind in kinds}
print(f"{'student':10} {'parameters':>10} {'seconds':>8}   test accuracy, seeds {', '.join(map(str, seeds))} -> mean"
      + quick_note(args))
for kind in kinds:
    print(f"{kind:10} {students[kind].num_parameters():10,} {np.mean(seconds[kind]):8.1f}   "
          + ", ".join(f"{a:.3f}" for a in acc[kind]) + f" -> {mean[kind]:.3f}")
print(f"teacher (CNN): {teacher_acc:.3f}; {len(test)} test images, one image is {100 / len(test):.2f} points")
for kind in kinds[1:]:
    wins = sum(d > p for d, p in zip(acc[kind], acc["plain ViT"]))
    print(f"{kind} - plain ViT: {mean[kind] - mean['plain ViT']:+.3f} on the mean; ahead on {wins} of {len(seeds)} "
          f"seed(s)")
viz.save(viz.bars({kind: mean[kind] for kind in kinds},
                  errors={kind: (max(acc[kind]) - min(acc[kind])) / 2 for kind in kinds},
                  ylabel="test accuracy", ymin=0.8, hlines={f"CNN teacher ({teacher_acc:.3f})": teacher_acc},
                  title=f"{epochs} epochs each, mean of {len(seeds)} seed(s); bars span the seeds"),
         plot_path(args, "14_distillation.png"))

# %% [markdown]
# ## Did the two tokens learn different things?
# DeiT reports that its class and distillation tokens end up close but not equal (cosine similarity 0.93 at the
# last layer): two views of one image, one shaped by the labels, one by the teacher. The same measurement on the
# soft student, and how often each head agrees with the teacher.

# %%
student = students["DeiT soft"]
student.eval()
with ta.no_grad():
    tokens, _ = student.features(ta.tensor(data.images[test]))
    class_logits = student.head(tokens[:, 0]).numpy()
    dist_logits = student.head_dist(tokens[:, 1]).numpy()
    teacher_choice = teacher(ta.tensor(data.images[test])).numpy().argmax(-1)
tokens = tokens.numpy()
cosine = float(np.mean(np.sum(tokens[:, 0] * tokens[:, 1], -1)
                       / (np.linalg.norm(tokens[:, 0], axis=-1) * np.linalg.norm(tokens[:, 1], axis=-1))))
agree_class = float((class_logits.argmax(-1) == teacher_choice).mean())
agree_dist = float((dist_logits.argmax(-1) == teacher_choice).mean())
print(f"last layer, class token vs distillation token: mean cosine similarity {cosine:.2f}")
print(f"agreement with the teacher's choice: class head {agree_class:.3f}, distillation head {agree_dist:.3f}")

# %% [markdown]
# Soft targets carry more than the label: the teacher's whole distribution says which wrong classes an image
# resembles. This teacher never saw shifted digits, and the teacher cell printed how often its top class is wrong on
# the shifted images the students learn from: there the hard student's distillation token is taught the teacher's
# mistake, while the soft student gets a distribution in which the true class keeps the weight printed there. Which
# student won, by how many test images and on how many seeds, is in the table above; a gap of one or two test images
# is within what one seed changes. To try: train the teacher on shifted images too (augment=True in its fit) and
# compare its test accuracy, how often it agrees with the labels, and the students.

# %%
if not args.quick:
    assert mean["plain ViT"] >= 0.9 and teacher_acc >= 0.9, (mean, teacher_acc)
    assert mean["DeiT soft"] > mean["plain ViT"], mean
report(vit_no_distill_acc=mean["plain ViT"], deit_soft_acc=mean["DeiT soft"], deit_hard_acc=mean["DeiT hard"],
       cnn_teacher_acc=teacher_acc, accuracy_per_seed={k: [round(a, 4) for a in v] for k, v in acc.items()},
       class_dist_token_cosine=cosine)
