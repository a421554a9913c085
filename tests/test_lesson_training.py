"""tinyattn/lesson_training.py: train_step is the loop's lines written out, in their order; fit trains."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn, optim
from tinyattn.lesson_training import accuracy, fit, train_step


def _model_and_schedule(seed):
    ta.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    optimizer = optim.AdamW(model.parameters(), lr=0.1)
    return model, optimizer, optim.LambdaLR(optimizer, optim.warmup_cosine(1, 3))


def _loss(model, step):
    rng = np.random.default_rng(step)
    x, y = ta.tensor(rng.standard_normal((5, 4), dtype=np.float32)), ta.tensor(rng.integers(0, 3, 5))
    return ta.nn.functional.cross_entropy(model(x), y)


@pytest.mark.parametrize("clip", [False, True])
def test_train_step_is_the_loop_written_out(clip):
    mine, optimizer, schedule = _model_and_schedule(0)
    theirs, their_optimizer, their_schedule = _model_and_schedule(0)
    for model in (mine, theirs):                      # gradients left over from before: zero_grad must come first
        _loss(model, 99).backward()
    for step in range(3):
        train_step(_loss(mine, step), optimizer, schedule, clip_parameters=mine.parameters() if clip else None,
                   max_norm=1e-3)
        loss = _loss(theirs, step)
        their_optimizer.zero_grad()
        loss.backward()
        if clip:                                       # a tiny norm: clipping before the step changes the step
            optim.clip_grad_norm_(theirs.parameters(), 1e-3)
        their_optimizer.step()
        their_schedule.step()
    for a, b in zip(mine.parameters(), theirs.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert schedule.last_epoch == their_schedule.last_epoch == 3


def test_clipping_and_the_schedule_change_what_train_step_does():
    plain, optimizer, _ = _model_and_schedule(0)
    clipped, clipped_optimizer, schedule = _model_and_schedule(0)
    train_step(_loss(plain, 0), optimizer)
    train_step(_loss(clipped, 0), clipped_optimizer, schedule, clip_parameters=clipped.parameters(), max_norm=1e-3)
    assert any(not np.array_equal(a.numpy(), b.numpy()) for a, b in zip(plain.parameters(), clipped.parameters()))
    assert schedule.last_epoch == 1


def test_fit_learns_a_separable_problem():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((256, 4)).astype(np.float32)
    labels = (images[:, 0] > 0).astype(np.int64)
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    assert fit(model, images, labels, epochs=5, lr=1e-2, seed=0, desc="fit", batch_size=32) > 0
    assert accuracy(model, images, labels) > 0.9 and model.training
