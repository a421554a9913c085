"""Softmax (lesson 03): gradcheck over every dim, the reference path, rows that overflow or are -inf, float32, and
a Seq2SeqAttention trained on the learner's softmax."""
import numpy as np

import tinyattn.functional as F
from lessons import mistakes
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_stays_float32, compare_paths, gradcheck, runs_forward_and_backward
from lessons.checking.shared import extreme, normal
from lessons.checking.steps import step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference


@exercise("03", "softmax, forward and backward", twins=["softmax"])
def softmax_backward(learner):
    cases = {f"{shape} over dim {dim}": (shape, dim)
             for shape, dim in [((4, 7), 1), ((2, 3, 5), 0), ((2, 3, 5), 1), ((2, 3, 5), 2), ((6,), 0)]}
    with step("your Softmax runs forward and backward"):
        runs_forward_and_backward("softmax", learner.Softmax, lambda x: F.softmax(x, 1), (normal(3, 5),), {"x": 0})
    with step("gradcheck in float64", cases) as each:
        for case, (shape, dim) in cases.items():
            with each.case(case):
                gradcheck("softmax", learner.Softmax, lambda x: F.softmax(x, dim), (normal(*shape),), {"x": 0},
                          mistakes.softmax)
    with step("outputs and gradients equal the reference path's", cases) as each:
        for case, (shape, dim) in cases.items():
            with each.case(case):
                compare_paths("softmax", learner.Softmax, lambda x: F.softmax(x, dim), (normal(*shape),), {"x": 0},
                              mistakes.softmax)
    with step("rows near +1000 and near -1000 (exp overflows and underflows), a row that is -inf in part and one "
              "that is -inf everywhere: no NaN"):
        x = extreme(4, 6)
        x[1, :3] = x[2] = -np.inf
        compare_paths("softmax", learner.Softmax, lambda x: F.softmax(x, -1), (x,), {"x": 0})
    with step("float32 stays float32"):
        assert_stays_float32("softmax", learner.Softmax, lambda x: F.softmax(x, -1), (normal(3, 4),))
    with step(f"a Seq2SeqAttention (its attention weights are a softmax) trains {TRAINING_STEPS} steps on yours to "
              "the reference path's loss") as notes:
        notes.append(train_like_the_reference("Seq2SeqAttention", softmax=learner.Softmax))
