"""Stochastic gradient descent with momentum, as torch.optim.SGD."""
from ..tensor import no_grad
from .optimizer import Optimizer


class SGD(Optimizer):
    """p -= lr * (momentum buffer of g + weight_decay * p), the first buffer being g itself; nesterov looks ahead
    along the buffer (as PyTorch)."""

    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0, nesterov=False):
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum requires a momentum > 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    @no_grad()
    def step(self):
        for group, p, g in self._with_grads():
            if group["weight_decay"]:
                g = g + group["weight_decay"] * p.array
            if group["momentum"]:
                state = self.state.setdefault(p, {})
                buf = state.get("momentum_buffer")
                buf = g.copy() if buf is None else buf * group["momentum"] + g
                state["momentum_buffer"] = buf
                g = g + group["momentum"] * buf if group["nesterov"] else buf
            p.array -= group["lr"] * g
            p._mark_modified()
