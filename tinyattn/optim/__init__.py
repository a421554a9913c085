"""Optimisers, gradient clipping and learning-rate schedules, with PyTorch's update rules and names.

Updates change parameter arrays in place (p.array), outside the graph, and count a version of each parameter (so a
backward through a graph built before the step raises instead of using the new values). Hyper-parameters live in
param_groups (a list of dicts), so a schedule or a per-group weight decay works as it does in PyTorch.
"""
from . import lr_scheduler
from .adam import Adam, AdamW
from .clip import clip_grad_norm_, clip_grad_value_
from .lr_scheduler import (CosineAnnealingLR, LambdaLR, LinearLR, LRScheduler, MultiStepLR, OneCycleLR,
                           ReduceLROnPlateau, SequentialLR, StepLR, warmup_cosine)
from .optimizer import Optimizer
from .sgd import SGD
