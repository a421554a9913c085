"""Exercise · single-head attention, forward and backward.       Lesson 03, "The backward pass, by hand".

Write scaled dot-product attention as a Function of your own. When it passes, `F.use` makes every model run on
it: lesson 06's GPT trains on your backward, and lesson 05's Transformer (with its attention dropout) can too.

Shapes
    q (..., L, E), k (..., S, E), v (..., S, Ev); the leading dims broadcast (a batch, the heads: here every head
    is one more batch dim). Output (..., L, Ev).
    mask: None; a boolean array that broadcasts to (..., L, S), True where query i may attend to key j; or a float
    array added to the scores (a learned bias: it needs a gradient when ctx.needs_input_grad[3]).
    scale: a float (1 / sqrt(E) unless the caller chose another).
    dropout_p: the probability of dropping each attention weight while a model trains (0.0 otherwise).

The math to derive (lesson 03 walks through it)
    S = scale * Q K^T + mask,   P = softmax(S) over the keys (each row),   O = P V.
    Given dO, find in turn dV and dP (a matrix product), dS (through each row's softmax), dQ and dK, and the
    float mask's gradient.
    Dropout (when dropout_p > 0): O = P' V with P' = P * D, D = dropout_scale(P.shape, dropout_p, q) (given: 0 for
    a dropped weight, 1 / (1 - dropout_p) for a kept one, drawn as the library draws it). Which of dV and dP
    change, and how?

What the checker holds you to
    - a query row whose every key is masked gives output 0 and gradient 0, never NaN (mask before the softmax:
      -inf - (-inf) is NaN);
    - gradients may keep broadcast shapes: the engine sums them back to each input's shape;
    - float32 stays float32.

When the check fails, which gradients are wrong says where to look (the checker names the pattern, and the
mistake when your numbers equal it):
    - dq and dk wrong, dv right: dV = P^T dO needs only P, so P is right: the softmax's backward (a missing
      row-sum term gives dS = P * dP) or the scale;
    - dq alone wrong by a constant ratio (1 / scale): the scale in dQ = scale dS K (dK alike);
    - a matmul error in backward: a product the wrong way round (P dO for P^T dO); the checker lists the shapes;
    - the forward wrong where a mask is, right without one: the mask applied after the softmax (mask the scores).

Check it:    python -m lessons check attention
Plug it in:  F.use(scaled_dot_product_attention=Attention), then train any model.
"""
from tinyattn import Function
from tinyattn.backend import xp_of

from lessons.exercises.given import dropout_scale


class Attention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        if enable_gqa:
            raise ValueError("this attention has no grouped heads: query heads sharing key/value heads are exercise "
                             "grouped_query (lessons/exercises/grouped_query.py)")
        xp = xp_of(q)                   # numpy, or cupy on a GPU
        # TODO: the scores S; the mask (boolean: -inf where False; float: added); P = softmax over the keys;
        #       with dropout_p > 0, P' = P * dropout_scale(p.shape, dropout_p, q); save what backward needs
        #       (ctx.save_for_backward(...), ctx.scale = scale); return P' V.
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: dV, dP, dS, dQ, dK from grad = dO (through the dropout's D when there was one); the mask's gradient
        #       is dS when ctx.needs_input_grad[3], else None.
        #       Return (dQ, dK, dV, d_mask, None, None, None): one per forward argument after ctx.
        raise NotImplementedError("not implemented yet")
