"""Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW."""
import math

from .. import backend, cpu
from ..tensor import no_grad
from . import adam_kernel
from .optimizer import Optimizer

# Parameters of at most this many values are updated together (Adam._batched).
SMALL_PARAMETER = 1 << 12


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
        # Each update is independent: the CPU threads share them.
        cpu.for_each_part(lambda update: self._update(*update), self._batched(updates))

    def _batched(self, updates):
        """(group, params, grads) per update: a parameter of its own, or all the small ones (biases, norms'
        weights) of a group, dtype, device and step count as one. Each small one's update would be ~14 NumPy calls on a
        few hundred values, costing more in calls than in arithmetic; together they are 14 calls on one array."""
        singles, small = [], {}
        for group, p, g in updates:
            if p.array.size <= SMALL_PARAMETER:
                key = (id(group), p.array.dtype, backend.device_of(p.array), self.state[p]["step"])
                _, params, grads = small.setdefault(key, (group, [], []))
                params.append(p)
                grads.append(g)
            else:
                singles.append((group, [p], [g]))
        return singles + list(small.values())

    def _update(self, group, params, grads):
        """One Adam step for params (one, or several small ones laid end to end in one flat array and put back)."""
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        xp = backend.xp_of(grads[0])
        states = [self.state[p] for p in params]
        names = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"] else [])
        if len(params) == 1:
            p, g, kept = params[0].array, grads[0], [states[0][name] for name in names]
        else:
            p, g = (xp.concatenate([a.reshape(-1) for a in arrays]) for arrays in ([q.array for q in params], grads))
            kept = [xp.concatenate([state[name].reshape(-1) for state in states]) for name in names]
        if wd and self.decoupled:
            p *= 1 - lr * wd                 # AdamW: shrink the weight directly, outside the moments
        elif wd:
            g = g + wd * p
        for state in states:
            state["step"] += 1
        t = states[0]["step"]
        m, v = kept[0], kept[1]
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        if group["amsgrad"]:                 # the largest second moment so far
            v = xp.maximum(kept[2], v, out=kept[2])
        # PyTorch's arrangement of the bias corrections, so float32 results agree to rounding; in one buffer.
        update = xp.sqrt(v)
        update /= math.sqrt(1 - beta2 ** t)
        update += eps
        xp.divide(m, update, out=update)
        update *= lr / (1 - beta1 ** t)
        p -= update
        if len(params) > 1:                  # back into each parameter and its state
            start = 0
            for q, state in zip(params, states):
                piece = slice(start, start + q.array.size)
                q.array[...] = p[piece].reshape(q.array.shape)
                for name, flat in zip(names, kept):
                    state[name][...] = flat[piece].reshape(q.array.shape)
                start = piece.stop
        for q in params:
            q._mark_modified()


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False, *,
                 foreach=None, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, fused=fused)
