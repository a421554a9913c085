"""Finite-difference gradient checks: does a Function's backward match the derivative of its forward?

Two ways, both in float64 with central differences (f(x + eps) - f(x - eps)) / 2 eps:
- full Jacobian, for small inputs and outputs: every entry, analytic against numerical;
- random directions, for large ones: for random u over the output and v over one input, the analytic
  <u, J v> (= <J^T u, v>, one backward) against the numerical derivative of <u, f(x + t v)> at t = 0.
Either raises GradcheckError naming the input, the place and both values of the worst mismatch.
"""
from . import backend
from .tensor import Tensor


class GradcheckError(RuntimeError):
    pass


def _outputs(fn, inputs):
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind == "f"]


def _flat_output(fn, inputs):
    """All floating outputs of fn, flattened and joined, as a raw array (no graph)."""
    from .tensor import no_grad
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
        total.backward()
    xp = backend.xp_of(weights)
    return [xp.zeros(t.shape) if t.grad is None else t.grad.array for t in inputs if _checked(t)]


def _checked(t):
    return isinstance(t, Tensor) and t.requires_grad


def _report(name, analytic, numerical, atol, rtol, where):
    xp = backend.xp_of(analytic)
    for values, which in ((analytic, "analytic (from backward)"), (numerical, "numerical (the function itself is NaN "
                                                                              "near the input)")):
        nan = xp.isnan(values).reshape(-1)
        if bool(nan.any()):
            raise GradcheckError(f"gradcheck failed for {name} at {where(int(xp.argmax(nan)))}: the {which} "
                                 f"gradient is NaN, at {int(nan.sum())} of {nan.size} places")
    excess = xp.abs(analytic - numerical) - (atol + rtol * xp.abs(numerical))
    worst = int(xp.argmax(excess))
    if float(excess.reshape(-1)[worst]) > 0:
        a, n = float(analytic.reshape(-1)[worst]), float(numerical.reshape(-1)[worst])
        raise GradcheckError(f"gradcheck failed for {name} at {where(worst)}: analytic {a:.10g}, "
                             f"numerical {n:.10g} (atol {atol}, rtol {rtol})")


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, full_jacobian=None, directions=3, max_full_size=256):
    """Check fn's backward against central differences for every input Tensor with requires_grad.

    fn takes the inputs (a Tensor or a tuple; other values pass through) and returns a Tensor or a tuple of them.
    full_jacobian=None picks the full check when every checked input and the output have at most max_full_size
    elements, the random-direction check otherwise. Returns True or raises GradcheckError.
    """
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    checked = [t for t in inputs if _checked(t)]
    if not checked:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    for i, t in enumerate(inputs):
        if _checked(t) and t.dtype != backend.float64:
            raise TypeError(f"gradcheck needs float64 inputs (float32 rounding swamps finite differences); "
                            f"input {i} of shape {t.shape} is {t.dtype}: use tensor.double()")
    names = {id(t): f"input {i} {t.shape}" for i, t in enumerate(inputs) if _checked(t)}
    xp = backend.xp_of(checked[0].array)
    out_size = int(_flat_output(fn, inputs).size)
    if full_jacobian is None:
        full_jacobian = out_size <= max_full_size and all(t.numel() <= max_full_size for t in checked)
    rng = backend.numpy.random.default_rng(0)  # fixed directions: a failing check fails the same way again

    def numerical_along(t, direction):
        """d/ds fn(x + s * direction) at s = 0 by central differences, for input t."""
        original = t.array.copy()
        t.array = original + eps * direction
        plus = _flat_output(fn, inputs)
        t.array = original - eps * direction
        minus = _flat_output(fn, inputs)
        t.array = original
        return (plus - minus) / (2 * eps)

    if full_jacobian:
        # Rows of the analytic Jacobian come from one backward per output element.
        analytic = [xp.zeros((out_size, t.numel())) for t in checked]
        for o in range(out_size):
            onehot = xp.zeros(out_size)
            onehot[o] = 1.0
            for rows, grad in zip(analytic, _backward_from(fn, inputs, onehot)):
                rows[o] = grad.reshape(-1)
        for t, jac in zip(checked, analytic):
            numerical = xp.zeros_like(jac)
            for j in range(t.numel()):
                direction = xp.zeros(t.numel())
                direction[j] = 1.0
                numerical[:, j] = numerical_along(t, direction.reshape(t.shape))
            shape = t.shape
            _report(names[id(t)], jac, numerical, atol, rtol,
                    lambda flat: f"element {tuple(int(i) for i in backend.numpy.unravel_index(flat % jac.shape[1], shape))}"
                                 f" (output element {flat // jac.shape[1]})")
    else:
        for d in range(directions):
            u = xp.asarray(rng.standard_normal(out_size))
            grads = _backward_from(fn, inputs, u)
            for t, grad in zip(checked, grads):
                v = xp.asarray(rng.standard_normal(t.shape))
                analytic = xp.asarray((grad * v).sum())
                numerical = xp.asarray((numerical_along(t, v) * u).sum())
                _report(names[id(t)], analytic, numerical, atol, rtol,
                        lambda flat: f"random direction {d}")
    for t in inputs:
        if isinstance(t, Tensor):
            t.grad = None
    return True
