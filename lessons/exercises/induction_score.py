"""Exercise · the induction score, from recorded attention weights.                  Lesson 20, induction heads.

An induction head completes a pattern it has seen once: at a token that occurred earlier, it attends to the token
that came right after that earlier occurrence (and copies it). On "A B ... A" it looks at B. How much a head does
this is a number you can compute from its attention weights and the tokens alone.

Record the weights of a model with tinyattn.interpret.record:

    with interpret.record(model) as cache:
        model(tokens)
    weights = [w.numpy() for w in cache.attention.values()]         # per layer (B, H, T, T)

Shapes
    induction_targets(tokens): tokens (B, T) ints -> (B, T, T) bool, True at [b, i, k] when k = j + 1 for some
        j < i with tokens[b, j] == tokens[b, i]: the positions right after the earlier copies of query i's token.
    induction_score(weights, tokens): weights, a list over layers of (B, H, T, T) NumPy arrays (rows are queries,
        columns keys) -> a (layers, heads) NumPy array: for each head, the attention a query puts on all of its
        targets together, averaged over every (sequence, query) that has at least one target. Queries without a
        target do not count. No loops needed (comparisons, np.tri, slicing, sums).

What to think through
    On a random sequence of distinct tokens repeated once, which queries have a target, and which one? What does a
    perfect induction head score, and a head that always looks at the previous token?
    A token that occurs three times has two targets at its third occurrence: its score counts them together.

Check it:    python -m lessons check induction_score
"""
import numpy as np


def induction_targets(tokens):
    # TODO: earlier copies [b, i, j] (same token, j < i), then shift them one key to the right (j -> j + 1).
    raise NotImplementedError("not implemented yet")


def induction_score(weights, tokens):
    # TODO: stack the layers, sum each query's weights on its targets, average over the queries that have one.
    raise NotImplementedError("not implemented yet")
