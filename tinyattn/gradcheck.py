"""Finite-difference gradient checks: does a Function's backward match the derivative of its forward?

Two ways, both in float64 with central differences (f(x + eps) - f(x - eps)) / 2 eps:
- full Jacobian, for small inputs and outputs: every entry, analytic against numerical;
- random directions, for large ones: for random u over the output and v over one input, the analytic
  <u, J v> (= <J^T u, v>, one backward) against the numerical derivative of <u, f(x + t v)> at t = 0.
Either raises GradcheckError naming the input (by fn's argument name where its signature gives one), the input and
output elements as index tuples, both values, how many entries fail and the ratio analytic / numerical over them:
the same ratio everywhere points to a missing factor, a few failing entries to an index slip. A random direction
only says that something is wrong, so on a failure it then finds the worst element itself: it halves the direction
until one input element is left, checks every element of that element's row one by one, and halves over the
outputs to find the output element.
"""
import inspect
import math

from . import backend
from .tensor import Function, Tensor, no_grad

ROW_CHECKED = 64   # at most this many elements of the located element's row are checked one by one


class GradcheckError(RuntimeError):
    pass


def _outputs(fn, inputs):
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind == "f"]


def _flat_output(fn, inputs):
    """All floating outputs of fn, flattened and joined, as a raw array (no graph)."""
    with no_grad():
        outs = _outputs(fn, inputs)
    xp = backend.xp_of(outs[0].array)
    return xp.concatenate([o.array.reshape(-1) for o in outs])


def _backward_from(fn, inputs, weights):
    """Analytic gradients of sum(weights * outputs) for each input that requires grad (one backward)."""
    for t in inputs:
        if isinstance(t, Tensor):
            t.grad = None
    outs = _outputs(fn, inputs)
    total, start = None, 0
    for o in outs:
        w = weights[start:start + o.numel()].reshape(o.shape)
        start += o.numel()
        if o.requires_grad:
            term = (o * Tensor(w)).sum()
            total = term if total is None else total + term
    if total is not None:
        total.backward(inputs=[t for t in inputs if _checked(t)])     # parameters inside fn keep their .grad
    xp = backend.xp_of(weights)
    return [xp.zeros(t.shape) if t.grad is None else t.grad.array for t in inputs if _checked(t)]


def _checked(t):
    return isinstance(t, Tensor) and t.requires_grad


def _argument_names(fn):
    """The names of fn's positional parameters (for a Function's apply, its forward's after ctx); [] if unknown."""
    owner = getattr(fn, "__self__", None)
    is_apply = isinstance(owner, type) and issubclass(owner, Function) and fn.__name__ == "apply"
    try:
        parameters = list(inspect.signature(owner.forward if is_apply else fn).parameters.values())
    except (TypeError, ValueError):
        return []
    names = []
    for p in parameters[1:] if is_apply else parameters:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return names


def _index(flat, shape):
    return tuple(int(i) for i in backend.numpy.unravel_index(int(flat), shape))


def _output_position(flat, shapes):
    """Where a position of the joined, flattened outputs lies: 'output element (i, j)', or 'output 1 element ...'
    when fn returns several."""
    for k, shape in enumerate(shapes):
        size = math.prod(shape)
        if flat < size:
            return f"{f'output {k}' if len(shapes) > 1 else 'output'} element {_index(flat, shape)}"
        flat -= size
    raise IndexError(flat)


def _ratio_summary(analytic, numerical, atol):
    """The ratio analytic / numerical over the failing entries given, smallest to largest, where numerical is not
    0 (within atol)."""
    xp = backend.xp_of(analytic)
    defined = xp.abs(numerical) > atol
    if not bool(defined.any()):
        return "numerical is 0 at every failing entry (backward gives a gradient where there is none)"
    ratios = analytic[defined] / numerical[defined]
    low, high = float(ratios.min()) + 0.0, float(ratios.max()) + 0.0        # + 0.0: no "-0"
    spread = f"{low:.4g} at every one" if math.isclose(low, high, rel_tol=1e-3) else f"from {low:.4g} to {high:.4g}"
    zeros = int((~defined).sum())
    return f"analytic / numerical {spread}" + (f" (and {zeros} where numerical is 0 but analytic is not)" if zeros
                                               else "")


def _failing(analytic, numerical, atol, rtol):
    """How far each entry lies outside the tolerance (> 0: it fails)."""
    xp = backend.xp_of(analytic)
    return xp.abs(analytic - numerical) - (atol + rtol * xp.abs(numerical))


ANALYTIC, NUMERICAL = "analytic (from backward)", "numerical (the function itself is NaN near the input)"


def _raise_on_nan(label, values, which, where):
    """A NaN gradient fails at once, saying where; which is ANALYTIC or NUMERICAL."""
    nan = backend.xp_of(values).isnan(values).reshape(-1)
    if bool(nan.any()):
        raise GradcheckError(f"gradcheck failed for {label} at {where(int(nan.argmax()))}: the {which} gradient is "
                             f"NaN, at {int(nan.sum())} of {nan.size} places")


def _one_hot(xp, size, position):
    e = xp.zeros(size)
    e[position] = 1.0
    return e


def _kept(x, positions):
    """x with every entry outside positions set to 0."""
    part = backend.xp_of(x).zeros_like(x)
    part[positions] = x[positions]
    return part


def _halve(xp, size, mismatch):
    """The one position of range(size) that carries most of a mismatch (analytic minus numerical, linear in the set
    of positions it is measured on), found by keeping the half that carries more, again and again."""
    positions = xp.arange(size)
    total = mismatch(positions)
    while positions.size > 1:
        first, second = positions[:positions.size // 2], positions[positions.size // 2:]
        in_first = mismatch(first)
        positions, total = (first, in_first) if abs(in_first) >= abs(total - in_first) else (second, total - in_first)
    return int(positions[0])


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, full_jacobian=None, directions=3, max_full_size=256):
    """Check fn's backward against central differences for every input Tensor with requires_grad.

    fn takes the inputs (a Tensor or a tuple; other values pass through) and returns a Tensor or a tuple of them.
    full_jacobian=None picks the full check when every checked input and the output have at most max_full_size
    elements, the random-direction check otherwise. Returns True or raises GradcheckError.
    """
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    grads = [(t, t.grad) for t in inputs if isinstance(t, Tensor)]
    try:
        return _check(fn, inputs, eps, atol, rtol, full_jacobian, directions, max_full_size)
    finally:
        for t, grad in grads:
            t.grad = grad                  # as they were, as PyTorch's gradcheck leaves them


def _check(fn, inputs, eps, atol, rtol, full_jacobian, directions, max_full_size):
    checked = [t for t in inputs if _checked(t)]
    if not checked:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    for i, t in enumerate(inputs):
        if _checked(t) and t.dtype != backend.float64:
            raise TypeError(f"gradcheck needs float64 inputs (float32 rounding swamps finite differences); "
                            f"input {i} of shape {t.shape} is {t.dtype}: use tensor.double()")
    argument_names = _argument_names(fn)
    names, labels = {}, {}                 # "q" and "q = input 0 (2, 3)"; "input 0" where fn's signature is silent
    for i, t in enumerate(inputs):
        if _checked(t):
            names[id(t)] = argument_names[i] if i < len(argument_names) else f"input {i}"
            labels[id(t)] = f"{argument_names[i]} = input {i} {t.shape}" if i < len(argument_names) else \
                f"input {i} {t.shape}"
    xp = backend.xp_of(checked[0].array)
    with no_grad():
        out_shapes = [tuple(o.shape) for o in _outputs(fn, inputs)]
    out_size = sum(math.prod(shape) for shape in out_shapes)
    if full_jacobian is None:
        full_jacobian = out_size <= max_full_size and all(t.numel() <= max_full_size for t in checked)
    rng = backend.numpy.random.default_rng(0)  # fixed directions: a failing check fails the same way again

    def numerical_along(t, direction):
        """d/ds fn(x + s * direction) at s = 0 by central differences, for input t."""
        original = t.array.copy()
        try:
            t.array = original + eps * direction.reshape(t.shape)
            plus = _flat_output(fn, inputs)
            t.array = original - eps * direction.reshape(t.shape)
            minus = _flat_output(fn, inputs)
        finally:
            t.array = original             # the input as given, even when fn raises
        return (plus - minus) / (2 * eps)

    if full_jacobian:
        # Rows of the analytic Jacobian come from one backward per output element.
        analytic = [xp.zeros((out_size, t.numel())) for t in checked]
        for o in range(out_size):
            for rows, grad in zip(analytic, _backward_from(fn, inputs, _one_hot(xp, out_size, o))):
                rows[o] = grad.reshape(-1)
        for t, jac in zip(checked, analytic):
            if jac.size == 0:              # a zero-size input or output: no entry to compare (backward still ran)
                continue
            numerical = xp.stack([numerical_along(t, _one_hot(xp, t.numel(), j))
                                  for j in range(t.numel())], axis=1)

            def where(flat, shape=t.shape, width=t.numel()):
                return f"element {_index(flat % width, shape)} ({_output_position(flat // width, out_shapes)})"
            _raise_on_nan(labels[id(t)], jac, ANALYTIC, where)
            _raise_on_nan(labels[id(t)], numerical, NUMERICAL, where)
            excess = _failing(jac, numerical, atol, rtol)
            worst = int(xp.argmax(excess))
            if float(excess.reshape(-1)[worst]) > 0:
                fails = excess > 0
                raise GradcheckError(
                    f"gradcheck failed for {labels[id(t)]} at {where(worst)}: analytic "
                    f"{float(jac.reshape(-1)[worst]):.10g}, numerical {float(numerical.reshape(-1)[worst]):.10g} "
                    f"(atol {atol}, rtol {rtol}). {int(fails.sum())} of {fails.size} Jacobian entries fail, in "
                    f"{int(fails.any(axis=0).sum())} of {t.numel()} elements of {names[id(t)]}; "
                    f"{_ratio_summary(jac[fails], numerical[fails], atol)}.")
    else:
        for d in range(directions):
            u = xp.asarray(rng.standard_normal(out_size))
            for position, (t, grad) in enumerate(zip(checked, _backward_from(fn, inputs, u))):
                _raise_on_nan(labels[id(t)], grad, ANALYTIC,
                              lambda flat, shape=t.shape: f"element {_index(flat, shape)} (random direction {d})")
                v = xp.asarray(rng.standard_normal(t.shape))
                analytic = float((grad * v).sum())
                numerical = xp.asarray((numerical_along(t, v) * u).sum())
                _raise_on_nan(labels[id(t)], numerical, NUMERICAL, lambda _: f"random direction {d}")
                numerical = float(numerical)
                if abs(analytic - numerical) > atol + rtol * abs(numerical):
                    located = _locate(t, grad, u, v, numerical_along,
                                      lambda w, i=position: _backward_from(fn, inputs, w)[i],
                                      names[id(t)], out_shapes, atol, rtol)
                    ratio = f", ratio {analytic / numerical:.4g}" if numerical else ""
                    raise GradcheckError(
                        f"gradcheck failed for {labels[id(t)]} in random direction {d}: <u, J v> analytic "
                        f"{analytic:.10g}, numerical {numerical:.10g}{ratio} (atol {atol}, rtol {rtol}). {located}")
    return True


def _locate(t, grad, u, v, numerical_along, backward, name, out_shapes, atol, rtol):
    """Where a failing random direction goes wrong, as sentences. grad is the analytic J^T u over input t; element e
    of it, numerically, is <u, d f / d x_e>. Halving v down to one element costs two evaluations of fn per halving;
    checking that element's row, two per element of it; halving over the outputs, one backward per halving."""
    xp = backend.xp_of(grad)
    grad, v = grad.reshape(-1), v.reshape(-1)
    worst = _halve(xp, v.size, lambda elements: float(grad[elements] @ v[elements])
                   - float(numerical_along(t, _kept(v, elements)) @ u))
    shape = t.shape or (1,)
    index = _index(worst, shape)

    # Its row (the last axis), at most ROW_CHECKED elements of it around the element, one element at a time.
    length = shape[-1]
    low = min(max(index[-1] - ROW_CHECKED // 2, 0), max(length - ROW_CHECKED, 0))
    high = min(low + ROW_CHECKED, length)
    row = range(worst - index[-1] + low, worst - index[-1] + high)
    columns = {e: numerical_along(t, _one_hot(xp, v.size, e)) for e in row}      # d f / d x_e, every output
    numerical = xp.asarray([float(columns[e] @ u) for e in row])
    analytic = grad[row.start:row.stop]
    fails = _failing(analytic, numerical, atol, rtol) > 0
    row_name = f"{name}[{', '.join([str(i) for i in index[:-1]] + [f'{low}:{high}'])}]"
    if not bool(fails.any()):
        return (f"Halving the direction led to element {index} of {name}, which passes on its own, as does all of "
                f"{row_name}: the error is spread thin over many elements. To see every entry, call gradcheck with "
                f"full_jacobian=True on inputs of a few elements each.")

    column = columns[worst]
    out = _halve(xp, u.size, lambda outputs: float(backward(_kept(u, outputs)).reshape(-1)[worst])
                 - float(column[outputs] @ u[outputs]))
    entry = float(backward(_one_hot(xp, u.size, out)).reshape(-1)[worst])
    return (f"Halving the direction located element {index} of {name}, at {_output_position(out, out_shapes)}: "
            f"analytic {entry:.10g}, numerical {float(column[out]):.10g}. Checked one by one, {int(fails.sum())} of "
            f"{len(row)} elements of {row_name} fail; {_ratio_summary(analytic[fails], numerical[fails], atol)}.")
