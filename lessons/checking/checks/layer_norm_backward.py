"""LayerNorm (lesson 05): gradcheck on x, weight and bias, the reference path, float32, and a GPT trained on it."""
import numpy as np

import tinyattn.functional as F
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_stays_float32, compare_paths, gradcheck, runs_forward_and_backward
from lessons.checking.shared import normal
from lessons.checking.steps import step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference


@exercise("05", "LayerNorm, forward and backward", twins=["layer_norm"])
def layer_norm_backward(learner):
    norm = lambda shape: lambda x, weight=None, bias=None: F.layer_norm(x, shape, weight, bias)
    cases = {"rows of 4 with weight and bias": (norm(4), normal(3, 4), normal(4, seed=1),
                                                          normal(4, seed=2)),
             "normalized over the last two dims (3, 4)": (norm((3, 4)), normal(2, 3, 4),
                                                                    normal(3, 4, seed=1), normal(3, 4, seed=2)),
             "no weight and no bias": (norm(5), normal(2, 3, 5)),
             "rows of equal values (variance 0)": (norm(4), np.ones((2, 4)), normal(4, seed=1), normal(4, seed=2))}
    grads = lambda arrays: {name: i for i, name in enumerate(("x", "weight", "bias")[:len(arrays)])}
    with step("your LayerNorm runs forward and backward"):
        call, *arrays = cases["rows of 4 with weight and bias"]
        runs_forward_and_backward("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("gradcheck in float64 on x, weight and bias", cases) as each:
        for case, (call, *arrays) in cases.items():
            with each.case(case):
                gradcheck("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("output and gradients equal the reference path's", cases) as each:
        for case, (call, *arrays) in cases.items():
            with each.case(case):
                compare_paths("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("float32 stays float32"):
        call, *arrays = cases["rows of 4 with weight and bias"]
        assert_stays_float32("layer_norm", learner.LayerNorm, call, arrays)
    with step(f"a GPT trains {TRAINING_STEPS} steps on your LayerNorm to the reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT", layer_norm=learner.LayerNorm))
