"""Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW."""
import math

from .. import backend, cpu
from ..tensor import no_grad
from . import adam_kernel
from .optimizer import Optimizer


class Adam(Optimizer):
    """Adam with bias correction; weight_decay adds wd * p to the gradient (L2), as torch.optim.Adam. amsgrad divides
    by the largest second moment seen so far instead of the current one (Reddi et al.), as PyTorch's amsgrad=True."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
                 foreach=None, fused=None):
        """foreach and fused are accepted so PyTorch code runs; they choose nothing here (there is one update)."""
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad))

    @no_grad()
    def step(self):
        updates = list(self._with_grads())
        for group, p, g in updates:   # state is created here, not in the threads below
            if p not in self.state:
                xp = backend.xp_of(p.array)
                self.state[p] = {"step": 0, "exp_avg": xp.zeros_like(p.array), "exp_avg_sq": xp.zeros_like(p.array)}
            if group["amsgrad"] and "max_exp_avg_sq" not in self.state[p]:
                self.state[p]["max_exp_avg_sq"] = backend.xp_of(p.array).zeros_like(p.array)
        # float32 on the GPU: one CUDA kernel for all parameters (it has no amsgrad: that runs the array code)
        if not any(group["amsgrad"] for group, _, _ in updates) and adam_kernel.applies(updates, self.state):
            adam_kernel.step(updates, self.state, self.decoupled)
            return
        # Each parameter's update is independent: the CPU threads share them.
        cpu.for_each_part(lambda update: self._update(*update), updates)

    def _update(self, group, p, g):
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        xp = backend.xp_of(p.array)
        if wd and self.decoupled:
            p.array *= 1 - lr * wd           # AdamW: shrink the weight directly, outside the moments
        elif wd:
            g = g + wd * p.array
        state = self.state[p]
        state["step"] += 1
        m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        if group["amsgrad"]:                 # the largest second moment so far
            v = xp.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
        # PyTorch's arrangement of the bias corrections, so float32 results agree to rounding; in one buffer.
        update = xp.sqrt(v)
        update /= math.sqrt(1 - beta2 ** t)
        update += eps
        xp.divide(m, update, out=update)
        update *= lr / (1 - beta1 ** t)
        p.array -= update
        p._mark_modified()


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False, *,
                 foreach=None, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, fused=fused)
