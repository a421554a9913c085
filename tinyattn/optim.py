"""Optimisers, gradient clipping and learning-rate schedules, with PyTorch's update rules and names.

Updates change parameter arrays in place (p.array), outside the graph. Hyper-parameters live in param_groups
(a list of dicts), so a schedule or a per-group weight decay works as it does in PyTorch.
"""
import math

from . import backend, cpu


class Optimizer:
    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = [{**defaults, **group, "params": list(group["params"])} for group in groups]
        self.state = {}  # id(param) -> that parameter's running buffers

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.array[...] = 0

    def _with_grads(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group, p, p.grad.array

    def step(self):
        raise NotImplementedError


class SGD(Optimizer):
    """p -= lr * (momentum buffer of g + weight_decay * p), the first buffer being g itself (as PyTorch)."""

    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    def step(self):
        for group, p, g in self._with_grads():
            if group["weight_decay"]:
                g = g + group["weight_decay"] * p.array
            if group["momentum"]:
                buf = self.state.get(id(p))
                buf = g.copy() if buf is None else buf * group["momentum"] + g
                self.state[id(p)] = buf
                g = g + group["momentum"] * buf if group["nesterov"] else buf
            p.array -= group["lr"] * g


class Adam(Optimizer):
    """Adam with bias correction; weight_decay adds wd * p to the gradient (L2), as torch.optim.Adam."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def step(self):
        updates = list(self._with_grads())
        for group, p, g in updates:   # state is created here, not in the threads below
            if id(p) not in self.state:
                xp = backend.xp_of(p.array)
                self.state[id(p)] = {"step": 0, "m": xp.zeros_like(p.array), "v": xp.zeros_like(p.array)}
        # Each parameter's update is independent: the CPU threads share them.
        cpu.for_each_part(lambda update: self._update(*update), updates)

    def _update(self, group, p, g):
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        xp = backend.xp_of(p.array)
        if wd and self.decoupled:
            p.array *= 1 - lr * wd           # AdamW: shrink the weight directly, outside the moments
        elif wd:
            g = g + wd * p.array
        state = self.state[id(p)]
        state["step"] += 1
        m, v, t = state["m"], state["v"], state["step"]
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        # PyTorch's arrangement of the bias corrections, so float32 results agree to rounding; in one buffer.
        update = xp.sqrt(v)
        update /= math.sqrt(1 - beta2 ** t)
        update += eps
        xp.divide(m, update, out=update)
        update *= lr / (1 - beta1 ** t)
        p.array -= update


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr, betas, eps, weight_decay)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
    """Scale all gradients together so their joint norm is at most max_norm; returns the norm before clipping.

    The scale is min(1, max_norm / (norm + 1e-6)) applied always, so there is no host sync to decide whether to clip.
    """
    from .tensor import Tensor
    grads = [p.grad.array for p in parameters if p.grad is not None]
    if not grads:
        return Tensor(backend.numpy.zeros((), dtype=backend.float32))
    xp = backend.xp_of(grads[0])
    if norm_type == math.inf:
        total = xp.max(xp.stack([xp.abs(g).max() for g in grads]))
    else:
        total = xp.stack([(xp.abs(g) ** norm_type).sum() for g in grads]).sum() ** (1.0 / norm_type)
    scale = xp.minimum(max_norm / (total + 1e-6), 1.0).astype(grads[0].dtype)
    for g in grads:
        g *= scale
    return Tensor(total)


class LambdaLR:
    """lr = base_lr * lr_lambda(step) for each group, as torch.optim.lr_scheduler.LambdaLR; call step() per update."""

    def __init__(self, optimizer, lr_lambda):
        self.optimizer, self.lr_lambda = optimizer, lr_lambda
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.last_epoch = 0
        self._apply()

    def _apply(self):
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * self.lr_lambda(self.last_epoch)

    def step(self):
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]


def warmup_cosine(warmup_steps, total_steps, min_ratio=0.0):
    """A multiplier for LambdaLR: linear warm-up from 0 to 1 over warmup_steps, then cosine decay to min_ratio."""
    def multiplier(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return multiplier
