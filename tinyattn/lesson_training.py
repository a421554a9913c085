"""The recipe the image-classifier lessons (15 and 16) share, written once: fit a model with AdamW, warm-up and
cosine decay on shuffled batches, and measure its accuracy."""
import time

import numpy as np

from . import functional as F
from . import optim
from .creation import tensor
from .data import batches
from .lesson import progress
from .tensor import no_grad


def accuracy(model, images, labels, **model_kwargs):
    """The share of images whose largest logit is their label, the model in eval mode (put back to training)."""
    model.eval()
    with no_grad():
        logits = model(tensor(images), **model_kwargs)
    model.train()
    return float((logits.numpy().argmax(-1) == labels).mean())


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
            loss = F.cross_entropy(model(tensor(images[rows])), tensor(labels[rows]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return time.perf_counter() - start
