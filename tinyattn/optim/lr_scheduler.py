"""Learning-rate schedules, as torch.optim.lr_scheduler: each sets group["lr"] of its optimizer at every step()."""
import math


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
