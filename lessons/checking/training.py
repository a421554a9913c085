"""Training like the reference: a few steps of Adam on a small model with the learner's Functions plugged in must
follow the reference path's losses step for step."""
import functools

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking.comparison import use
from lessons.checking.steps import Mismatch
from tinyattn import models, optim

TRAINING_STEPS = 20


def _gpt(**changes):
    return models.GPT(models.GPTConfig(**{**dict(vocab_size=10, block_size=12, n_layer=2, num_heads=2, d_model=16),
                                          **changes}))


def _gpt_loss(model, step):
    """Next-token loss on counting mod 10 with a stride of 1, 2 or 3: the next digit follows from the last two,
    which attention has to look back for."""
    rng = np.random.default_rng(step)
    sequence = (rng.integers(0, 10, (8, 1)) + rng.integers(1, 4, (8, 1)) * np.arange(13)) % 10
    return model(ta.tensor(sequence[:, :-1]), ta.tensor(sequence[:, 1:]))[1]


def _seq2seq():
    return models.Seq2SeqAttention(models.Seq2SeqConfig(src_vocab=9, tgt_vocab=9, embed_dim=8, hidden=8,
                                                        attention_dim=8))


def _seq2seq_loss(model, step):
    """Copy ragged source strings (lengths 2..5, padded with 0) to the target between BOS 1 and EOS 2."""
    rng = np.random.default_rng(step)
    src = np.zeros((6, 5), dtype=np.int64)
    tgt = np.zeros((6, 7), dtype=np.int64)
    for row, length in enumerate(rng.integers(2, 6, 6)):
        src[row, :length] = rng.integers(3, 9, length)
        tgt[row, :length + 2] = [1, *src[row, :length], 2]
    logits, _ = model(ta.tensor(src), ta.tensor(tgt[:, :-1]))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ta.tensor(tgt[:, 1:].reshape(-1)), ignore_index=0)


MODELS = {  # name -> (build, loss of one training step), each in float64 on the reference path
    "GPT": (_gpt, _gpt_loss),
    "GPT with impl='flash'": (functools.partial(_gpt, impl="flash"), _gpt_loss),
    "GPT with 4 query heads sharing 2 key/value heads": (functools.partial(_gpt, num_heads=4, num_kv_heads=2),
                                                        _gpt_loss),
    "Seq2SeqAttention": (_seq2seq, _seq2seq_loss),
}


def _train(model_name, functions):
    build, loss_of = MODELS[model_name]
    ta.manual_seed(0)
    model = build().double()
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    with ta.reference(), use(**functions):
        for i in range(TRAINING_STEPS):
            loss = loss_of(model, i)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


@functools.lru_cache(maxsize=None)
def _reference_losses(model_name):
    return tuple(_train(model_name, {}))


def train_like_the_reference(model_name, **functions):
    """TRAINING_STEPS of Adam on the model with the learner's Functions plugged in must follow the reference path's
    losses step for step (float64: the same math gives the same numbers)."""
    mine, expected = _train(model_name, functions), _reference_losses(model_name)
    for i, (a, b) in enumerate(zip(mine, expected)):
        if not abs(a - b) <= 1e-7 * abs(b):
            raise Mismatch(f"training {model_name} with your Function: loss {a:.10g} at step {i}, the reference path "
                           f"reaches {b:.10g} (all steps, yours: {' '.join(f'{x:.4f}' for x in mine)})")
    return (f"loss after {TRAINING_STEPS} steps: yours {mine[-1]:.6f}, reference {expected[-1]:.6f} "
            f"(from {expected[0]:.6f})")
