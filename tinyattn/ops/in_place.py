"""In-place operations, with PyTorch's rules: x += y, x[i] = v, x.add_(y), x.zero_(), x.copy_(y), ...

- Under no_grad, or when nothing taking part requires grad, x's values change in its own memory (an optimizer step,
  an initialisation, a mask being built).
- On a leaf tensor that requires grad, outside no_grad, the change raises: the gradient would describe values the
  tensor no longer holds.
- On a tensor inside a graph, the change is differentiable: x takes the history of its new value, and the old
  value lives on for the graph in a copy. When x is a slice of another tensor (x = y[i]), y changed too: y takes
  the history of index_put(old y, i, new x), so its later uses see the change in their gradients. An in-place
  change of another kind of view (a reshape, a transpose) inside a graph raises instead.
Each change counts one version of x's memory: backward through a Function that saved that memory then raises.
"""
from .. import backend
from ..backend import generator, xp_of
from ..tensor import Tensor, is_grad_enabled, no_grad
from .elementwise import add, clamp, div, exp, floor_divide, mul, pow, relu, remainder, sigmoid, sub, tanh
from .indexing import check_broadcasts_to, index_fill, index_put, masked_fill, scatter, scatter_add
from .promotion import cast
from .shapes import expand


def change_in_place(x, compute, *others):
    """x with its values replaced, in its own memory, by compute(x, *others) (a function of tensors), as the rules
    above. An other that is x itself (x *= x) reads x's old value."""
    takes_grad = is_grad_enabled() and (x.requires_grad or any(isinstance(o, Tensor) and o.requires_grad
                                                                for o in others))
    if takes_grad and x.is_leaf and x.requires_grad:
        raise RuntimeError(f"a leaf tensor that requires grad (shape {x.shape}) is used in an in-place operation: do "
                           "it under `with ta.no_grad():` (an optimizer step, an initialisation), or on a clone()")
    bases = _viewed_tensors(x) if takes_grad else []
    if takes_grad:
        before = Tensor(x.array.copy(), requires_grad=x.requires_grad)       # the old value, for the graph
        before._node = x._node
        new = compute(before, *(before if o is x else o for o in others))
    else:
        with no_grad():
            new = compute(x, *others)
    write(x, new.array)
    if takes_grad:
        x._take_history(new._node)
        for base, index, before in bases:           # each tensor x is a slice of takes the change into its history
            new = index_put(before, index, new)
            base._take_history(new._node)
    return x


def _viewed_tensors(x):
    """(tensor, index, a graph tensor carrying its history so far) for each tensor x is a slice of, innermost
    first."""
    found = []
    while x._is_view:
        if x._base is None:
            raise RuntimeError(f"an in-place operation on a view (shape {x.shape}) made by a reshape, transpose or "
                               "similar, while the graph is recorded: the tensor it views would not see the change in "
                               "its gradient. Change that tensor itself, or compute out of place")
        base, index = x._base
        if base.is_leaf and base.requires_grad:
            raise RuntimeError(f"a view of a leaf tensor that requires grad (shape {base.shape}) is used in an "
                               "in-place operation: do it under `with ta.no_grad():`, or on a clone()")
        before = Tensor(base.array, requires_grad=base.requires_grad)     # base's history; index_put saves no
        before._node = base._node                                         # values, so its memory needs no copy
        found.append((base, index, before))
        x = base
    return found


def write(x, values):
    """Copy values (broadcast to x's shape, of a dtype that casts to x's within its kind) into x's memory."""
    check_broadcasts_to(values.shape, x.shape, "the result of the in-place operation")
    if not backend.numpy.can_cast(values.dtype, x.dtype, casting="same_kind"):
        raise RuntimeError(f"an in-place operation on a {x.dtype} tensor gives {values.dtype} values, which cannot be "
                           f"cast to {x.dtype}: compute it out of place")
    if not getattr(x.array.flags, "writeable", True):         # NumPy's broadcast views (expand) are read-only
        raise RuntimeError(f"unsupported operation: more than one element of the written-to tensor (shape {x.shape}, "
                           "made by expand or broadcast_to) refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")
    x.array[...] = values
    x._mark_modified()


def _constant(x, values):
    return Tensor(xp_of(x.array).asarray(values, dtype=x.dtype))


def add_(x, other, alpha=1):
    return change_in_place(x, lambda t, o: add(t, o if alpha == 1 else o * alpha), other)


def sub_(x, other, alpha=1):
    return change_in_place(x, lambda t, o: sub(t, o if alpha == 1 else o * alpha), other)


def mul_(x, other):
    return change_in_place(x, mul, other)


def div_(x, other):
    return change_in_place(x, div, other)


def floor_divide_(x, other):
    return change_in_place(x, floor_divide, other)


def remainder_(x, other):
    return change_in_place(x, remainder, other)


def pow_(x, exponent):
    return change_in_place(x, pow, exponent)


def exp_(x):
    return change_in_place(x, exp)


def relu_(x):
    return change_in_place(x, relu)


def tanh_(x):
    return change_in_place(x, tanh)


def sigmoid_(x):
    return change_in_place(x, sigmoid)


def fill_(x, value):
    return change_in_place(x, lambda t: _constant(t, xp_of(t.array).full(t.shape, value, dtype=t.dtype)))


def zero_(x):
    return fill_(x, 0)


def copy_(x, source):
    return change_in_place(x, lambda t, s: expand(cast(s, t.dtype, t), t.shape), source)


def clamp_(x, min=None, max=None):
    return change_in_place(x, lambda t: clamp(t, min, max))


def masked_fill_(x, mask, value):
    return change_in_place(x, lambda t, v: masked_fill(t, mask, v), value)


def scatter_(x, dim, index, src=None, value=None):
    return change_in_place(x, lambda t, s: scatter(t, dim, index, s, value), src)


def scatter_add_(x, dim, index, src):
    return change_in_place(x, lambda t, s: scatter_add(t, dim, index, s), src)


def index_fill_(x, dim, index, value):
    return change_in_place(x, lambda t: index_fill(t, dim, index, value))


def normal_(x, mean=0.0, std=1.0):
    """Fill with draws from N(mean, std^2), from the seeded generator of x's device."""
    return change_in_place(x, lambda t: _constant(t, mean + std * generator(t.device).standard_normal(t.shape)))


def uniform_(x, a=0.0, b=1.0):
    """Fill with draws from U(a, b), from the seeded generator of x's device."""
    return change_in_place(x, lambda t: _constant(t, a + (b - a) * generator(t.device).random(t.shape)))


def setitem(x, index, values):
    """x[index] = values."""
    change_in_place(x, lambda t, v: index_put(t, index, v), values)
