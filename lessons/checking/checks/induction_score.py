"""The induction score (lesson 20): on heads made by hand, on random causal weights, and on a small GPT's recorded
weights."""
import numpy as np

import tinyattn as ta
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_close
from lessons.checking.shared import normal
from lessons.checking.steps import step
from tinyattn import interpret, models


def _causal_weights(layers, batch, heads, length, seed):
    """Random causal attention weights, rows summing to 1: a list over layers of (B, H, T, T)."""
    scores = np.where(np.tri(length, dtype=bool), normal(layers, batch, heads, length, length, seed=seed, scale=2.0),
                      -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return list(weights / weights.sum(axis=-1, keepdims=True))


def _repeated(batch, period, seed):
    """(B, 2 * period) token ids: period distinct random tokens of 50, repeated once."""
    rng = np.random.default_rng(seed)
    return np.tile(np.stack([rng.permutation(50)[:period] for _ in range(batch)]), 2)


@exercise("20", "the induction score from recorded attention weights",
          twins=["tinyattn.interpret.head_scores:induction_score"])
def induction_score(learner):
    period = 5
    tokens = _repeated(2, period, seed=0)
    one_head = lambda target: np.stack([np.eye(2 * period)[[target(i) if i >= period else i for i in
                                                            range(2 * period)]]] * 2)[:, None]        # (B, 1, T, T)
    induction, previous = one_head(lambda i: i - period + 1), one_head(lambda i: i - 1)
    with step(f"a random sequence of {period} tokens repeated once: a head that attends to the token after the "
              "first copy scores 1, one that attends to the previous token 0"):
        assert_close("induction_score([[induction, previous]])", learner.induction_score(
            [np.concatenate([induction, previous], axis=1)], tokens), np.array([[1.0, 0.0]]))
    cases = {"a sequence of 5 distinct tokens repeated once": _repeated(2, 5, seed=1),
             "tokens 0 to 3 (many repeats, several copies)": np.random.default_rng(2).integers(0, 4, (3, 10)),
             "no token repeated in the first sequence": np.stack([np.arange(8), np.arange(8) % 3])}
    with step("induction_targets(tokens): True at [b, i, j + 1] for every j < i with the same token", cases) as each:
        for case, ids in cases.items():
            with each.case(case):
                expected = np.zeros(ids.shape + ids.shape[1:], dtype=bool)
                for b, i, j in np.ndindex(expected.shape):
                    expected[b, i, j] = j >= 1 and j - 1 < i and ids[b, j - 1] == ids[b, i]
                assert_close(f"induction_targets, {case}", learner.induction_targets(ids), expected)
    with step("induction_score equals tinyattn.interpret.induction_score on random causal weights of 2 layers, "
              "3 heads", cases) as each:
        for seed, (case, ids) in enumerate(cases.items()):
            with each.case(case):
                weights = _causal_weights(2, ids.shape[0], 3, ids.shape[1], seed)
                assert_close(f"induction_score, {case}", learner.induction_score(weights, ids),
                             interpret.induction_score(weights, ids))
    with step("on the weights of a 2-layer attention-only GPT recorded with interpret.record, on 4 random sequences "
              "of 7 tokens repeated once"):
        ta.manual_seed(0)
        model = models.GPT(models.GPTConfig(vocab_size=50, block_size=16, n_layer=2, num_heads=4, d_model=32,
                                            mlp="none")).double().eval()
        ids = _repeated(4, 7, seed=3)
        with ta.no_grad(), interpret.record(model) as cache:
            model(ta.tensor(ids))
        weights = [w.numpy() for w in cache.attention.values()]
        assert_close("induction_score", learner.induction_score(weights, ids), interpret.induction_score(weights, ids))
