"""What every attention Function needs from its arguments: the default scale, one mask from attn_mask and
is_causal, boolean masks as additive biases, and query heads grouped over shared key/value heads (GQA/MQA)."""
import math

from ..backend import broadcast_shapes, xp_of


def check_attention_inputs(query, key, value, mask, enable_gqa, caller):
    """Errors that name the caller's own shapes: query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev)
    with batch dims that broadcast, and a mask (bool: True = may attend, or float: added to the scores, in the
    query's dtype) that broadcasts to the scores (..., Hq, L, S) without growing them."""
    q, k, v = tuple(query.shape), tuple(key.shape), tuple(value.shape)
    shapes = f"query {q}, key {k}, value {v}"
    if min(len(q), len(k), len(v)) < 2:
        raise RuntimeError(f"{caller}: query, key and value need shapes (..., length, features), got {shapes}")
    if k[-1] != q[-1]:
        raise RuntimeError(f"{caller}: query and key need one feature size E, got {shapes}")
    if k[-2] != v[-2]:
        raise RuntimeError(f"{caller}: key and value need one length S, got {shapes}")
    if len(k) >= 3 and len(v) >= 3 and k[-3] != v[-3]:
        raise RuntimeError(f"{caller}: key and value need one number of heads, got {shapes}")
    group_size(q, k, v, enable_gqa)
    try:
        batch = broadcast_shapes(q[:-3], k[:-3], v[:-3])
    except ValueError:
        raise RuntimeError(f"{caller}: the batch dims of {shapes} do not broadcast together") from None
    scores = batch + (q[-3] if len(q) >= 3 else 1, q[-2], k[-2])
    if mask is None:
        return
    if mask.dtype != bool and (mask.dtype.kind != "f" or mask.dtype != query.dtype):
        raise RuntimeError(f"{caller}: attn_mask must be bool (True = may attend) or a float mask of the query's dtype "
                           f"{query.dtype} (added to the scores), got dtype {mask.dtype}")
    try:
        fits = broadcast_shapes(tuple(mask.shape), scores) == scores
    except ValueError:
        fits = False
    if not fits:
        raise RuntimeError(f"{caller}: attn_mask of shape {tuple(mask.shape)} does not broadcast to the attention "
                           f"scores' shape {scores} (batch..., query heads, query length, key length)")


def default_scale(query, scale):
    """1 / sqrt(E) unless a scale is given, as PyTorch."""
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)


def causal_mask(query_len, key_len, xp, offset=0):
    """Boolean (L, S) mask, True where query i may see key j: j <= i + offset (offset 0: PyTorch's top-left)."""
    return xp.tril(xp.ones((query_len, key_len), dtype=bool), offset)


def check_mask_choice(attn_mask, is_causal):
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both (combine them into one mask)")


def with_row_and_key_axes(mask):
    """A mask of fewer than 2 dims (a (S,) row of keys, a 0-d flag) as (1, S) or (1, 1): it broadcasts the same,
    and the Functions index its query-row and key axes. Works on arrays and tensors alike."""
    if mask is None or mask.ndim >= 2:
        return mask
    return mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))


def attention_mask(attn_mask, is_causal, query_len, key_len, like):
    """The one mask attention applies: attn_mask, or the causal mask for is_causal."""
    check_mask_choice(attn_mask, is_causal)
    return causal_mask(query_len, key_len, xp_of(like)) if is_causal else attn_mask


def additive_mask(mask, dtype):
    """A mask as something to add to scores: boolean True (may attend) -> 0, False -> -inf; a float mask as it is."""
    if mask is None or mask.dtype != bool:
        return mask
    xp = xp_of(mask)
    return xp.where(mask, xp.zeros((), dtype=dtype), xp.asarray(-xp.inf, dtype=dtype))


def group_size(q_shape, k_shape, v_shape, enable_gqa):
    """How many query heads share each key/value head (1 without grouping); an error for counts that don't fit."""
    hq, hkv = q_shape[-3] if len(q_shape) >= 3 else 1, k_shape[-3] if len(k_shape) >= 3 else 1
    if hq == hkv:
        return 1
    if not enable_gqa:
        raise ValueError(f"query has {hq} heads but key/value have {hkv}: pass enable_gqa=True for grouped-query "
                         f"attention (q {q_shape}, k {k_shape}, v {v_shape})")
    if hq % hkv:
        raise ValueError(f"grouped-query attention needs query heads ({hq}) divisible by key/value heads ({hkv})")
    return hq // hkv


def group_heads(q, k, v, mask, enable_gqa):
    """Views that let Hq query heads share Hkv key/value heads without copying K and V.

    q (..., Hq, L, E) becomes (..., Hkv, G, L, E); k and v gain a size-1 group axis that broadcasts; the mask is
    viewed the same way. Returns the views and G (1 when there is no grouping). Gradients for k and v come back
    with the group axis, to be summed over it (ungroup_grad).
    """
    groups = group_size(q.shape, k.shape, v.shape, enable_gqa)
    if groups == 1:
        return q, k, v, mask, 1
    hq, hkv, xp = q.shape[-3], k.shape[-3], xp_of(q)
    if mask is not None:
        mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)
        split = (hkv, groups) if mask.shape[-3] == hq else (1, 1)
        mask = mask.reshape(mask.shape[:-3] + split + mask.shape[-2:])
    return split_heads(q, groups), xp.expand_dims(k, -3), xp.expand_dims(v, -3), mask, groups


def split_heads(x, groups):
    """(..., Hq, L, X) -> (..., Hq / G, G, L, X): query-side arrays in the grouped layout."""
    return x if groups == 1 else x.reshape(x.shape[:-3] + (x.shape[-3] // groups, groups) + x.shape[-2:])


def merge_heads(x, groups):
    """(..., Hkv, G, L, X) -> (..., Hkv * G, L, X): the grouped layout back to one axis of query heads."""
    return x if groups == 1 else x.reshape(x.shape[:-4] + (-1,) + x.shape[-2:])


def ungroup_grad(grad, groups):
    """A key or value gradient in the grouped layout, summed over the query heads of each group."""
    return grad.sum(axis=-3) if groups > 1 else grad
