"""Bahdanau's additive attention scores (lesson 02): gradcheck, the reference path, ragged source lengths, float32,
and a Seq2SeqAttention trained on the learner's scores."""
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_stays_float32, compare_paths, gradcheck, runs_forward_and_backward
from lessons.checking.shared import normal
from lessons.checking.steps import step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference


@exercise("02", "Bahdanau's additive attention scores, forward and backward", twins=["additive_scores"])
def additive_attention(learner):
    scores = lambda q_proj, k_proj, v: F.additive_scores(q_proj, k_proj, v)
    grad_of = {"q_proj": 0, "k_proj": 1, "v": 2}
    cases = {"B 2, Lq 3, S 4, H 5": (normal(2, 3, 5), normal(2, 4, 5, seed=1), normal(5, seed=2)),
             "a decoder step, Lq 1": (normal(3, 1, 4), normal(3, 6, 4, seed=1), normal(4, seed=2))}
    with step("your AdditiveScores runs forward and backward"):
        runs_forward_and_backward("additive_scores", learner.AdditiveScores, scores, cases["B 2, Lq 3, S 4, H 5"],
                                  grad_of)
    with step("gradcheck in float64 on q_proj, k_proj and v", cases) as each:
        for case, arrays in cases.items():
            with each.case(case):
                gradcheck("additive_scores", learner.AdditiveScores, scores, arrays, grad_of)
    with step("scores and gradients equal the reference path's", cases) as each:
        for case, arrays in cases.items():
            with each.case(case):
                compare_paths("additive_scores", learner.AdditiveScores, scores, arrays, grad_of)
    with step("ragged source lengths 6, 2 and 4: F.additive_attention's context and every gradient equal the "
              "reference path's"):
        mask = np.arange(6) < np.array([6, 2, 4])[:, None]
        context = lambda query, key, value, w_query, w_key, v: F.additive_attention(
            query, key, value, w_query, w_key, v, mask=ta.tensor(mask))[0]
        arrays = (normal(3, 2, 5), normal(3, 6, 4, seed=1), normal(3, 6, 3, seed=2), normal(7, 5, seed=3),
                  normal(7, 4, seed=4), normal(7, seed=5))
        compare_paths("additive_scores", learner.AdditiveScores, context, arrays,
                      {"query": 0, "key": 1, "value": 2, "w_query": 3, "w_key": 4, "v": 5})
    with step("float32 stays float32"):
        assert_stays_float32("additive_scores", learner.AdditiveScores, scores, cases["a decoder step, Lq 1"])
    with step(f"a Seq2SeqAttention trains {TRAINING_STEPS} steps on your scores to the reference path's loss") as notes:
        notes.append(train_like_the_reference("Seq2SeqAttention", additive_scores=learner.AdditiveScores))
