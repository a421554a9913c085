"""Cross-entropy with label smoothing (lesson 08): gradcheck with an ignored row, the reference path, extreme
logits, float32, and a GPT trained on the learner's loss."""
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_stays_float32, compare_paths, gradcheck, runs_forward_and_backward
from lessons.checking.shared import extreme, normal
from lessons.checking.steps import step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference


@exercise("08", "cross-entropy with label smoothing, forward and backward", twins=["cross_entropy"])
def label_smoothing(learner):
    target = np.array([0, 3, -100, 2, 4])                     # row 2 is ignored (ignore_index -100)

    def loss(reduction, eps, target=target):
        return lambda logits: F.cross_entropy(logits, ta.tensor(target), reduction=reduction, label_smoothing=eps)
    logits = normal(5, 6)
    cases = {f"{reduction}, label smoothing {eps}": (reduction, eps)
             for reduction in ("mean", "sum", "none") for eps in (0.0, 0.1, 0.3)}
    with step("your CrossEntropy runs forward and backward"):
        runs_forward_and_backward("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (logits,), {"logits": 0})
    with step("gradcheck in float64, with a row that ignore_index leaves out", cases) as each:
        for case, options in cases.items():
            with each.case(case):
                gradcheck("cross_entropy", learner.CrossEntropy, loss(*options), (logits,), {"logits": 0})
    with step("loss and gradient equal the reference path's", cases) as each:
        for case, options in cases.items():
            with each.case(case):
                compare_paths("cross_entropy", learner.CrossEntropy, loss(*options), (logits,), {"logits": 0})
    with step("rows of logits near +1000 and near -1000, and a batch whose every row is ignored (mean 0, "
              "gradient 0)"):
        compare_paths("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (extreme(5, 6),), {"logits": 0})
        compare_paths("cross_entropy", learner.CrossEntropy, loss("mean", 0.1, np.full(5, -100)), (logits,),
                      {"logits": 0}, "every row ignored")
    with step("float32 stays float32"):
        assert_stays_float32("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (logits,))
    with step(f"a GPT trains {TRAINING_STEPS} steps on your loss to the reference path's") as notes:
        notes.append(train_like_the_reference("GPT", cross_entropy=learner.CrossEntropy))
