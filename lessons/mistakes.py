"""The common mistakes of the exercises, as the checker recognises them.

Two kinds of hint. A pattern: which of the output and the gradients are wrong says where to look (dq and dk wrong,
dv right: dV = P^T dO needs only P, so P is right and the error lies between P and S, in the softmax's backward). An
exact match: the checker recorded the arrays the learner's forward got and returned and what the backward returned;
each mistake below is computed from the same arrays, and one whose numbers the learner's equal is named.

Each function takes what was recorded (`seen`: "args" of forward, its "output", the "upstream" gradient backward got,
the "grads" it returned) and the names found wrong ("output", "dq", ...), and returns hint lines.
"""
import numpy as np

from tinyattn.functional.softmax import softmax_array

ATTENTION_PATTERNS = {   # the wrong ones among dq, dk, dv (the output right) -> where to look
    frozenset({"dq", "dk"}): "look at the softmax's backward (dV = P^T dO is right, so P is: the error lies between "
                             "P and S, in dS = P * (dP - rowsum(dP * P)), or in the scale)",
    frozenset({"dq"}): "look at dQ = scale dS K alone (the scale, the order of the product)",
    frozenset({"dk"}): "look at dK = scale dS^T Q alone (the scale, the transpose)",
    frozenset({"dv"}): "look at dV = P^T dO (P transposed; the P that the forward used)",
    frozenset({"dq", "dk", "dv"}): "look at what the three share: the P that backward reads (is it the one the "
                                   "forward used?) and dP = dO V^T",
}
OUTPUT_WRONG = "the forward is wrong, and every gradient follows from it: fix the output first"


def attention_pattern(seen, wrong):
    """Where the wrong ones among attention's output, dq, dk and dv point."""
    if "output" in wrong:
        return [OUTPUT_WRONG]
    pattern = ATTENTION_PATTERNS.get(frozenset(wrong & {"dq", "dk", "dv"}))
    hints = [pattern] if pattern else []
    if "dmask" in wrong:
        hints.append("a float mask is added to S, so its gradient is dS itself")
    return hints


def attention_dropout(seen, wrong):
    """Attention with dropout: the pattern, and what dropout asks of the forward and the backward."""
    return attention_pattern(seen, wrong) + [
        "with dropout O = P' V, P' = P * D, D = dropout_scale(P.shape, dropout_p, q) (given: it drops the weights the "
        "library drops, with the same seed); then dV = P'^T dO and dP = (dO V^T) * D"]


def attention(seen, wrong):
    """The pattern, then the common mistake of single-head attention that the learner's numbers equal, if one does.
    The output is judged here too: the gradcheck step looks at the gradients alone, and a wrong forward comes first."""
    q, k, v, mask, scale, dropout_p = seen["args"][:6]
    if dropout_p:
        return attention_pattern(seen, wrong)          # a random mask: nothing to match exactly
    p = softmax_array(_scores(q, k, mask, scale), -1)
    mine = dict(zip(("dq", "dk", "dv"), seen["grads"]), output=seen["output"])
    shapes = {"dq": q.shape, "dk": k.shape, "dv": v.shape, "output": seen["output"].shape}
    if not _equal(mine["output"], p @ v, shapes["output"]):
        wrong = wrong | {"output"}
    found = [f"looks like this mistake: {name}" for name, computed in _attention_mistakes(q, k, v, mask, scale, p,
                                                                                           seen["upstream"])
             if set(computed) <= wrong and all(_equal(mine[what], value, shapes[what])
                                               for what, value in computed.items())]
    return attention_pattern(seen, wrong) + found[:1]


def _scores(q, k, mask, scale):
    """S = scale Q K^T with the mask: -inf where a boolean mask is False, a float mask added."""
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if mask is None:
        return s
    return np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask


def _attention_mistakes(q, k, v, mask, scale, p, grad):
    """(name, {what: the array the mistake gives}) for the common mistakes, on the arrays the learner's got; p is
    the right P."""
    t = lambda x: np.swapaxes(x, -1, -2)
    if mask is not None and mask.dtype == bool:
        yield ("the mask is applied after the softmax: a masked key must get -inf in the scores before it, so that "
               "each row's weights sum to 1 over the keys it may see",
               {"output": (softmax_array(_scores(q, k, None, scale), -1) * mask) @ v})
    dp = grad @ t(v)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    no_row_sum = p * dp
    yield ("the row-sum term of the softmax's backward is missing: dS = P * (dP - rowsum(dP * P)), not P * dP",
           {"dq": scale * (no_row_sum @ k), "dk": scale * (t(no_row_sum) @ q)})
    yield ("the scale is missing in dQ and dK: S = scale Q K^T, so dQ = scale dS K and dK = scale dS^T Q",
           {"dq": ds @ k, "dk": t(ds) @ q})
    yield "the scale is missing in dQ: S = scale Q K^T, so dQ = scale dS K", {"dq": ds @ k}
    yield "the scale is missing in dK: S = scale Q K^T, so dK = scale dS^T Q", {"dk": t(ds) @ q}
    if p.shape[-1] == p.shape[-2]:      # a product the wrong way round has the right shape only when L = S
        yield "a product the wrong way round: dV = P^T dO, not P dO", {"dv": p @ grad}
        yield "a product the wrong way round: dQ = scale dS K, not scale dS^T K", {"dq": scale * (t(ds) @ k)}
        yield "a product the wrong way round: dK = scale dS^T Q, not scale dS Q", {"dk": scale * (ds @ q)}


FLASH_FORWARD_PATTERNS = {   # the wrong ones among flash attention's output and L -> where to look
    frozenset({"output"}): "L is right, so m and l are: look at acc, which alpha must rescale as it rescales l, "
                           "and at O = acc / l",
    frozenset({"L"}): "L is each row's log-sum-exp, m + log l with the row block's last m and l (+inf where every "
                      "key is masked); the given backward rebuilds every P = exp(S - L) from it, so every gradient "
                      "follows L",
    frozenset({"output", "L"}): "look at m and l first: the output (acc / l) and L (m + log l) are both made "
                                "from them",
}


def flash_forward(lse, m, l, wrong):
    """Where the wrong ones among flash attention's output and L point, then the common mistake of L that the
    learner's lse equals, if one does: m and l are each row's running max and sum after its row block's last tile
    (the library's), all three (..., N, 1)."""
    hints = [FLASH_FORWARD_PATTERNS[frozenset(wrong)]] if wrong else []
    if "L" not in wrong or lse is None or lse.shape != m.shape:
        return hints
    seen = l > 0                                         # a row that saw no key: L must be +inf, nothing to match
    with np.errstate(divide="ignore"):
        mistakes = {"L = m + l: L is m + log l": m + l, "L = log l: the max m must be added back, L = m + log l":
                    np.log(l), "L = m: log l is missing, L = m + log l": m}
    found = [f"looks like this mistake: {name}" for name, computed in mistakes.items()
             if seen.any() and np.allclose(lse[seen], computed[seen], rtol=1e-7, atol=1e-9)]
    if (~seen & np.isfinite(lse)).any():
        found.append("a row whose every key is masked ends with l = 0 and must get L = +inf (so that backward's "
                     "P = exp(S - L) is 0 there); yours is finite there")
    return hints + found[:1]


def attention_shapes(q, k, v):
    """The shapes of attention's pieces, for an error in a product: each gradient has its input's shape."""
    lead, (L, E), (S, Ev) = q.shape[:-2], q.shape[-2:], v.shape[-2:]
    shape = lambda *last: str(lead + last).replace(",)", ")")
    return (f"the shapes here: q {shape(L, E)}, k {shape(S, E)}, v {shape(S, Ev)}; S, P, dP and dS {shape(L, S)}; "
            f"the output and dO {shape(L, Ev)}. Each gradient has its input's shape: dV {shape(S, Ev)} = "
            f"P^T {shape(S, L)} dO {shape(L, Ev)}, dQ {shape(L, E)} = scale dS {shape(L, S)} K {shape(S, E)}, "
            f"dK {shape(S, E)} = scale dS^T {shape(S, L)} Q {shape(L, E)}")


def softmax(seen, wrong):
    """Softmax's common mistakes that the learner's gradient equals."""
    if "output" in wrong:
        return [OUTPUT_WRONG]
    (x, dim), grad = seen["args"][:2], seen["upstream"]
    p = softmax_array(x, dim)
    mistakes = {"the row-sum term is missing: dx = p * (g - sum(g * p)), not p * g": p * grad,
                "the sum inside is of g alone: dx = p * (g - sum(g * p)), not p * (g - sum(g))":
                    p * (grad - grad.sum(axis=dim, keepdims=True))}
    return [f"looks like this mistake: {name}" for name, computed in mistakes.items()
            if _equal(seen["grads"][0], computed, x.shape)][:1]


def _equal(mine, computed, shape):
    """Whether the learner's array equals the mistake's, each summed back to the input's shape (as the engine does
    with a gradient that keeps broadcast dims)."""
    if mine is None or computed is None:
        return False
    try:
        mine, computed = _summed_to(np.asarray(mine), shape), _summed_to(np.asarray(computed), shape)
    except ValueError:
        return False
    return mine.shape == computed.shape and np.allclose(mine, computed, rtol=1e-7, atol=1e-9)


def _summed_to(x, shape):
    x = x.sum(axis=tuple(range(x.ndim - len(shape)))) if x.ndim > len(shape) else x
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, x.shape)) if n == 1 and m != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x
