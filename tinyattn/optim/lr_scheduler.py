"""Learning-rate schedules, as torch.optim.lr_scheduler: each sets group["lr"] of its optimizer, from the group's
initial learning rate and the number of step() calls so far (last_epoch), in closed form."""
import bisect
import math


class LRScheduler:
    """The base: base_lrs are the groups' learning rates when the first scheduler was made ("initial_lr", set once,
    as in PyTorch); call step() after each optimizer.step().

    The constructor applies step 0 to a group that had no initial_lr yet (a fresh optimizer). A group that has one
    keeps the learning rate it has: its optimizer's state was loaded from a checkpoint (whose lr is the one to resume
    with: load the scheduler's state_dict next and step() continues the schedule), or another scheduler drives it
    already (SequentialLR's parts). PyTorch's StepLR, MultiStepLR and CosineAnnealingLR keep it too."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        fresh = ["initial_lr" not in group for group in optimizer.param_groups]
        self._set_initial_lrs(optimizer.param_groups)
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = 0
        self._apply(0, fresh)

    def _set_initial_lrs(self, groups):
        for group in groups:
            group.setdefault("initial_lr", group["lr"])
    def lrs(self, epoch):
        """The learning rate of every group at this epoch."""
        raise NotImplementedError

    def step(self):
        self.last_epoch += 1
        self._apply(self.last_epoch, [True] * len(self.optimizer.param_groups))

    def _apply(self, epoch, groups):
        """Write the schedule at epoch into the groups marked True."""
        for group, lr, write in zip(self.optimizer.param_groups, self.lrs(epoch), groups):
            if write:
                group["lr"] = lr

    def get_last_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items() if key != "optimizer" and not callable(value)}

    def load_state_dict(self, state):
        self.__dict__.update(state)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer, lr_lambda):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer)

    def lrs(self, epoch):
        return [base * self.lr_lambda(epoch) for base in self.base_lrs]


def _check_positive(caller, **values):
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{caller}: {name} must be positive, got {value}")


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1):
        _check_positive("StepLR", step_size=step_size)
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lrs(self, epoch):
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (how many milestones epoch has reached)."""

    def __init__(self, optimizer, milestones, gamma=0.1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def lrs(self, epoch):
        return [base * self.gamma ** bisect.bisect_right(self.milestones, epoch) for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2 (PyTorch's closed form)."""

    def __init__(self, optimizer, T_max, eta_min=0.0):
        _check_positive("CosineAnnealingLR", T_max=T_max)
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lrs(self, epoch):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = base_lr * a factor going linearly from start_factor to end_factor over total_iters steps."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("start_factor must be in (0, 1] and end_factor in [0, 1]")
        _check_positive("LinearLR", total_iters=total_iters)
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def lrs(self, epoch):
        factor = self.start_factor + (self.end_factor - self.start_factor) * min(epoch, self.total_iters) \
            / self.total_iters
        return [base * factor for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """schedulers[i] runs from milestones[i - 1] on (counting its own epochs from 0 there)."""

    def __init__(self, optimizer, schedulers, milestones):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR needs one milestone fewer than schedulers, got {len(milestones)} for "
                             f"{len(schedulers)}")
        self.schedulers, self.milestones = schedulers, list(milestones)
        super().__init__(optimizer)

    def lrs(self, epoch):
        i = bisect.bisect_right(self.milestones, epoch)
        start = self.milestones[i - 1] if i else 0
        return self.schedulers[i].lrs(epoch - start)

    def state_dict(self):
        return {**super().state_dict(), "schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state):
        state = dict(state)
        for scheduler, saved in zip(self.schedulers, state.pop("schedulers")):
            scheduler.load_state_dict(saved)
        super().load_state_dict(state)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): the learning rate rises from max_lr / div_factor to max_lr over the first
    pct_start of total_steps, then anneals to that start / final_div_factor; momentum (SGD's momentum, Adam's beta1)
    moves the other way between max_momentum and base_momentum, as in PyTorch."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95, div_factor=25.0,
                 final_div_factor=1e4):
        self.total_steps = total_steps or (epochs * steps_per_epoch if epochs and steps_per_epoch else None)
        if not self.total_steps or self.total_steps < 0:
            raise ValueError(f"OneCycleLR needs a positive total_steps, or epochs and steps_per_epoch, got "
                             f"total_steps={total_steps}, epochs={epochs}, steps_per_epoch={steps_per_epoch}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be a float between 0 and 1, got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        groups = optimizer.param_groups
        self.max_lrs = max_lr if isinstance(max_lr, (list, tuple)) else [max_lr] * len(groups)
        self.div_factor, self.final_div_factor = div_factor, final_div_factor
        self.peak = float(pct_start * self.total_steps) - 1
        self.anneal = (lambda start, end, pct: end + (start - end) / 2 * (1 + math.cos(math.pi * pct))) \
            if anneal_strategy == "cos" else (lambda start, end, pct: start + (end - start) * pct)
        self.cycle_momentum, self.momenta = cycle_momentum, (max_momentum, base_momentum)
        super().__init__(optimizer)

    def _set_initial_lrs(self, groups):
        """The cycle's start, peak and end rates, from max_lr (as PyTorch's, which writes them over any there)."""
        for group, top in zip(groups, self.max_lrs):
            group["initial_lr"] = top / self.div_factor
            group["max_lr"], group["min_lr"] = top, group["initial_lr"] / self.final_div_factor

    def _phase(self, epoch, start, peak, end):
        if epoch <= self.peak:
            return self.anneal(start, peak, epoch / self.peak)
        return self.anneal(peak, end, (epoch - self.peak) / (self.total_steps - 1 - self.peak))

    def lrs(self, epoch):
        if epoch > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {epoch} times for total_steps={self.total_steps}")
        return [self._phase(epoch, g["initial_lr"], g["max_lr"], g["min_lr"]) for g in self.optimizer.param_groups]

    def _apply(self, epoch, groups):
        """The learning rate and, with cycle_momentum, the momentum (SGD's momentum, Adam's beta1)."""
        super()._apply(epoch, groups)
        if not self.cycle_momentum:
            return
        high, low = self.momenta
        momentum = self._phase(epoch, high, low, high)
        for group, write in zip(self.optimizer.param_groups, groups):
            if write and "betas" in group:
                group["betas"] = (momentum, group["betas"][1])
            elif write and "momentum" in group:
                group["momentum"] = momentum


class ReduceLROnPlateau(LRScheduler):
    """Multiply each group's learning rate by factor (not below min_lr) once the metric passed to step(metric) has not
    improved for more than patience steps, then wait cooldown steps, as torch.optim.lr_scheduler.ReduceLROnPlateau.
    mode "min" (a loss) or "max" (an accuracy); an improvement beats the best so far by threshold, relative
    ("rel": best * (1 -+ threshold)) or absolute ("abs": best -+ threshold); a change smaller than eps is skipped.
    It follows a metric, not the step count, so there is no formula per step and the constructor changes nothing."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0.0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max' and threshold_mode 'rel' or 'abs', got "
                             f"{mode!r} and {threshold_mode!r}")
        groups = optimizer.param_groups
        min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * len(groups)
        if len(min_lrs) != len(groups):
            raise ValueError(f"ReduceLROnPlateau: expected {len(groups)} min_lrs (one per group), got {len(min_lrs)}")
        self.optimizer, self.min_lrs = optimizer, min_lrs
        self.mode, self.factor, self.patience, self.cooldown, self.eps = mode, factor, patience, cooldown, eps
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0

    def is_better(self, value, best):
        relative = self.threshold_mode == "rel"
        if self.mode == "min":
            return value < (best * (1 - self.threshold) if relative else best - self.threshold)
        return value > (best * (1 + self.threshold) if relative else best + self.threshold)

    def step(self, metrics):
        value = float(metrics)
        self.last_epoch += 1
        if self.is_better(value, self.best):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:                      # bad steps do not count while cooling down
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, floor)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0


def warmup_cosine(warmup_steps, total_steps, min_ratio=0.0):
    """A multiplier for LambdaLR: linear warm-up from 0 to 1 over warmup_steps, then cosine decay to min_ratio."""
    def multiplier(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return multiplier
