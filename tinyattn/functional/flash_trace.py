"""Flash attention watched tile by tile: trace_flash_attention runs the reference twin's own loops (forward, then
backward) with flash_attention.tile_recorder set, and keeps what each visited tile computed as plain records.

The trace is of the reference: the fast twin fixes each row's max from its first block and never rescales, so
there is no running max to watch there (lesson 04 says why it may)."""
import math
from typing import NamedTuple

from ..backend import xp_of
from ..tensor import Tensor
from . import twins
from .flash_attention import flash_attention, tile_recorder


class FlashTrace(NamedTuple):
    """records: one dict per visited tile, the forward's in loop order then the backward's; output: the attention's
    output; grads: dQ, dK, dV (arrays on the inputs' device)."""
    records: list
    output: object
    grads: tuple


def trace_flash_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                          block_size=16, grad_output=None):
    """Run flash attention's reference forward and backward on copies of query, key and value (Tensors or arrays)
    and return a FlashTrace. Arguments as flash_attention's; grad_output is dO (ones when None).

    Every record has "pass" ("forward" or "backward"), "tile" (its index in that pass), "rows" and "cols" (the
    query and key positions, (start, stop)), "label" (how the walk, the player and the grader name it: "forward
    tile 3 of 10 (query rows 16-31, keys 16-31)", counted from 1 in its pass), "tile_bytes" (what the loop holds
    for that tile: the bytes of the arrays below but "partial", each in its dtype, the inputs' one; backward's
    S - L, in float64, lives only while P is made from it) and "matrix_bytes" (the whole score matrix at the same
    dtype, which the loop never holds). Its arrays keep the inputs' leading dims (batch, heads):
    - forward: "scores" (the masked block S), "p" (exp(S - m)), "m_before", "m", "l_before", "l" (running max and
      normaliser before and after the block), "alpha" (the rescale exp(m_before - m)), "acc" (the unnormalised
      output after it) and "partial" (acc / l: the output as far as the keys seen so far, 0 where l = 0; drawn for
      the eye, the loop divides once, at the end);
    - backward: "scores", "p" (the recomputed probabilities exp(S - L)), "dp" (dO V^T), "ds" (dS) and "dq", "dk",
      "dv" (the block's contributions to the three gradients).
    """
    records, tiles = [], {"forward": 0, "backward": 0}

    def record(which, rows, cols, **arrays):
        tile_bytes = sum(int(a.nbytes) for a in arrays.values())
        if which == "forward":                 # for the eye only: the loop itself divides once, at the end
            xp, l = xp_of(arrays["l"]), arrays["l"]
            arrays["partial"] = xp.where(l > 0, arrays["acc"] / xp.where(l > 0, l, 1), 0).astype(l.dtype)
        scores = arrays["scores"]
        records.append({"pass": which, "tile": tiles[which],
                        "rows": (rows.start, rows.stop), "cols": (cols.start, cols.stop), **arrays,
                        "tile_bytes": tile_bytes,
                        "matrix_bytes": int(math.prod(scores.shape[:-2]) * q.shape[-2] * k.shape[-2]
                                            * scores.dtype.itemsize)})
        tiles[which] += 1

    leaves = [Tensor(t.array if isinstance(t, Tensor) else t, requires_grad=True) for t in (query, key, value)]
    q, k, v = leaves
    token = tile_recorder.set(record)
    try:
        with twins.reference():
            out = flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                  enable_gqa=enable_gqa, block_size=block_size, fused=False)
            grad = xp_of(out.array).ones_like(out.array) if grad_output is None else grad_output
            out.backward(Tensor(grad.array if isinstance(grad, Tensor) else grad))
    finally:
        tile_recorder.reset(token)
    for r in records:
        r["label"] = (f"{r['pass']} tile {r['tile'] + 1} of {tiles[r['pass']]} (query rows {r['rows'][0]}-"
                      f"{r['rows'][1] - 1}, keys {r['cols'][0]}-{r['cols'][1] - 1})")
    if not records:
        raise RuntimeError("trace_flash_attention recorded no tile: a Function of one's own (F.use) ran instead of "
                           "flash attention's reference twin, or the inputs have no rows")
    return FlashTrace(records, out.array, tuple(t.grad.array for t in leaves))
