"""Single-head attention (lesson 03): the steps shared with grouped-query attention on masks and broadcasting,
dropout on both paths with one seed, and a GPT trained on the learner's attention."""
import functools

import numpy as np

import tinyattn as ta
from lessons import mistakes
from lessons.checking.checks import exercise
from lessons.checking.comparison import compare_paths, gradcheck
from lessons.checking.shared import attention_grads, check_attention, normal, padding, sdpa
from lessons.checking.steps import step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference


def _seeded(call, seed=0):
    """call with tinyattn's generators seeded first, every time: dropout drops the same weights on every call (for
    gradcheck) and on both paths."""
    @functools.wraps(call)                      # gradcheck names the inputs by call's argument names
    def seeded(*args):
        ta.manual_seed(seed)
        return call(*args)
    return seeded


@exercise("03", "single-head attention, forward and backward", twins=["scaled_dot_product_attention"], place=2)
def attention(learner):
    q, k, v = normal(2, 2, 3, 4), normal(2, 2, 5, 4, seed=1), normal(2, 2, 5, 3, seed=2)
    no_key_for_row_1 = np.ones((3, 5), dtype=bool)
    no_key_for_row_1[1] = False
    cases = {"no mask": (q, k, v, None, False),
             "k and v (1, 2, 5, .) broadcast over q's batch": (q, k[:1], normal(1, 2, 5, 6), None, False),
             "is_causal, 3 queries and 5 keys": (q, k, v, None, True),
             "padding mask (2, 1, 1, 5), lengths 5 and 2": (q, k, v, padding([5, 2], 5), False),
             "a query whose every key is masked": (q, k, v, no_key_for_row_1, False),
             "a learned float mask (3, 5)": (q, k, v, normal(3, 5, seed=3), False)}
    check_attention(learner.Attention, cases, enable_gqa=False, diagnose=mistakes.attention)
    dropped = {"no mask": (q, k, v, None), "a learned float mask (3, 5)": (q, k, v, normal(3, 5, seed=3))}
    with step("dropout 0.3 (the same seed on both paths): gradcheck, output and every gradient", dropped) as each:
        call = _seeded(sdpa(False, dropout_p=0.3))
        for case, arrays in dropped.items():
            with each.case(case):
                gradcheck("scaled_dot_product_attention", learner.Attention, call, arrays, attention_grads(arrays[3]),
                          mistakes.attention_dropout)
                compare_paths("scaled_dot_product_attention", learner.Attention, call, arrays,
                              attention_grads(arrays[3]), mistakes.attention_dropout)
    with step(f"a GPT trains {TRAINING_STEPS} steps on your attention to the reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT", scaled_dot_product_attention=learner.Attention))
