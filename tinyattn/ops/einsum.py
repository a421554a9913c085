"""einsum: products and sums named by subscripts, as torch.einsum, forward beside backward."""
import string

from ..backend import xp_of
from ..tensor import Function, Tensor


def parse(equation, ndims):
    """(input subscripts, output subscripts) with every '...' written out as capital letters, right-aligned as
    broadcasting aligns dims; an implicit output (no '->') is the ellipsis then the letters seen once, sorted."""
    equation = equation.replace(" ", "")
    left, arrow, right = equation.partition("->")
    inputs = left.split(",")
    if len(inputs) != len(ndims):
        raise RuntimeError(f"einsum: {equation!r} names {len(inputs)} operands, got {len(ndims)}")
    spans = [ndim - (len(sub) - 3) if "..." in sub else 0 for sub, ndim in zip(inputs, ndims)]
    width = max(spans, default=0)
    spare = [c for c in string.ascii_uppercase if c not in equation][:width]
    inputs = [sub.replace("...", "".join(spare[width - span:])) for sub, span in zip(inputs, spans)]
    for sub, ndim in zip(inputs, ndims):
        if len(sub) != ndim:
            raise RuntimeError(f"einsum: subscripts {sub!r} do not fit an operand with {ndim} dims ({equation!r})")
    if arrow:
        output = right.replace("...", "".join(spare))
    else:
        letters = "".join(inputs)
        output = "".join(spare) + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in spare))
    return inputs, output


class Einsum(Function):
    """out = einsum(inputs -> output). The gradient of one operand is the einsum of the output's gradient with the
    other operands, back to that operand's subscripts; letters it alone summed away were constant along the way,
    so the gradient is the same along them."""

    @staticmethod
    def forward(ctx, *operands, inputs, output):
        for sub in inputs:
            if len(set(sub)) != len(sub):
                raise RuntimeError(f"einsum: a letter repeated in one operand ({sub!r}: a trace or diagonal) is "
                                   "not supported")
        xp = xp_of(operands[0])
        sizes = {}
        for sub, x in zip(inputs, operands):
            for letter, n in zip(sub, x.shape):
                if sizes.get(letter, 1) == 1:
                    sizes[letter] = n
                elif n not in (1, sizes[letter]):
                    raise ValueError(f"letter {letter!r} stands for sizes {sizes[letter]} and {n}")
        # size-1 dims broadcast, as in PyTorch; the engine sums their gradients back
        operands = [xp.broadcast_to(x, tuple(sizes[c] for c in sub)) for sub, x in zip(inputs, operands)]
        ctx.save_for_backward(*operands)
        ctx.inputs, ctx.output = inputs, output
        return xp.einsum(f"{','.join(inputs)}->{output}", *operands)

    @staticmethod
    def backward(ctx, grad):
        operands = ctx.saved_tensors
        xp = xp_of(grad)
        grads = []
        for i, (sub, x) in enumerate(zip(ctx.inputs, operands)):
            if not ctx.needs_input_grad[i]:
                grads.append(None)
                continue
            others = [(s, o) for j, (s, o) in enumerate(zip(ctx.inputs, operands)) if j != i]
            seen = set(ctx.output).union(*(set(s) for s, _ in others))
            kept = "".join(c for c in sub if c in seen)
            g = xp.einsum(",".join([ctx.output] + [s for s, _ in others]) + "->" + kept, grad, *(o for _, o in others))
            for axis, letter in enumerate(sub):
                if letter not in seen:
                    g = xp.expand_dims(g, axis)
            grads.append(xp.broadcast_to(g, x.shape))
        return tuple(grads)


def einsum(equation, *operands):
    operands = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    if not all(isinstance(o, Tensor) for o in operands):
        raise TypeError("einsum takes tensors after its equation")
    if len({o.dtype for o in operands}) > 1:
        raise RuntimeError(f"einsum needs operands of one dtype, got {[str(o.dtype) for o in operands]}")
    inputs, output = parse(equation, [o.ndim for o in operands])
    try:
        return Einsum.apply(*operands, inputs=inputs, output=output)
    except ValueError as error:
        raise RuntimeError(f"einsum {equation!r} on shapes {[o.shape for o in operands]}: {error}") from None
