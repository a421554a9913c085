"""Stochastic gradient descent with momentum, as torch.optim.SGD."""
from ..tensor import no_grad
from .optimizer import Optimizer


class SGD(Optimizer):
    """p -= lr * d with d = g + weight_decay * p, or with momentum the buffer b = momentum * b + (1 - dampening) * d
    (the first b being d itself); nesterov looks ahead along the buffer, d + momentum * b; maximize climbs (-g).
    Arguments in PyTorch's order."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        """foreach, differentiable and fused are accepted so PyTorch code runs; they choose nothing here."""
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum > 0 and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    @no_grad()
    def step(self):
        for group, p, g in self._with_grads():
            if group["maximize"]:
                g = -g
            if group["weight_decay"]:
                g = g + group["weight_decay"] * p.array
            if group["momentum"]:
                state = self.state.setdefault(p, {})
                buf = state.get("momentum_buffer")
                buf = g.copy() if buf is None else buf * group["momentum"] + (1 - group["dampening"]) * g
                state["momentum_buffer"] = buf
                g = g + group["momentum"] * buf if group["nesterov"] else buf
            p.array -= group["lr"] * g
            p._mark_modified()
