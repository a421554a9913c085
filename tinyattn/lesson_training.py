"""What the lessons' training loops share, written once: train_step, the step after a forward, and the recipe of the
image-classifier lessons (15 and 16): fit a model with AdamW, warm-up and cosine decay on shuffled batches, and
measure its accuracy.

Lessons 06-14, 17 and 20 call train_step. Lessons 01, 02 and 05 write the step out, where a reader first meets it
(01 and 02: zero the gradients, backward, clip, step; 05 adds the schedule, a warm-up and a cosine decay); 18 reads
the gradients between backward and the step (each block's gradient norm at the first step); and 22 is about the step
itself (DistributedDataParallel averaging the gradients, ZeRO sharding the optimizer)."""
import time

import numpy as np

from . import functional as F
from . import optim
from .creation import tensor
from .datasets import batches
from .lesson import progress
from .tensor import no_grad


def accuracy(model, images, labels, **model_kwargs):
    """The share of images whose largest logit is their label, the model in eval mode (put back to training)."""
    model.eval()
    with no_grad():
        logits = model(tensor(images), **model_kwargs)
    model.train()
    return float((logits.numpy().argmax(-1) == labels).mean())


def train_step(loss, optimizer, schedule=None, clip_parameters=None, max_norm=1.0):
    """Zero the gradients, backward from loss, clip the gradients of clip_parameters (model.parameters(), say) to a
    total norm of max_norm when they are given, take the optimizer's step, then the schedule's when there is one."""
    optimizer.zero_grad()
    loss.backward()
    if clip_parameters is not None:
        optim.clip_grad_norm_(clip_parameters, max_norm)
    optimizer.step()
    if schedule is not None:
        schedule.step()


def fit(model, images, labels, epochs, lr, seed, desc, batch_size=64, weight_decay=0.05):
    """AdamW (weight decay 0.05), the learning rate warmed up over the first tenth of the steps and then decayed on a
    cosine, epochs over batches of batch_size shuffled by seed. Returns the seconds the training took."""
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total = epochs * -(-len(images) // batch_size)
    schedule = optim.LambdaLR(optimizer, optim.warmup_cosine(total // 10, total))
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in progress(range(epochs), desc=desc):
        for rows in batches(len(images), batch_size, rng):
            train_step(F.cross_entropy(model(tensor(images[rows])), tensor(labels[rows])), optimizer, schedule)
    return time.perf_counter() - start
