"""The base of every optimizer: parameter groups with their hyper-parameters, per-parameter state, zero_grad, and
state_dict / load_state_dict in PyTorch's layout, so training resumes where it stopped."""
import copy

from .. import backend
from ..tensor import Tensor, as_array


def check_hyperparameters(lr=None, eps=None, betas=None, weight_decay=None, momentum=None):
    """ValueError, as in torch.optim, for a value no optimizer can use."""
    if lr is not None and not lr >= 0:
        raise ValueError(f"Invalid learning rate: {lr} (it must be >= 0)")
    if eps is not None and not eps >= 0:
        raise ValueError(f"Invalid epsilon value: {eps} (it must be >= 0)")
    for i, beta in enumerate(betas or ()):
        if not 0 <= beta < 1:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta} (it must lie in [0, 1))")
    if weight_decay is not None and not weight_decay >= 0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay} (it must be >= 0)")
    if momentum is not None and not momentum >= 0:
        raise ValueError(f"Invalid momentum value: {momentum} (it must be >= 0)")


class Optimizer:
    """params: an iterable of tensors, or of dicts {"params": [...], "lr": ...} (parameter groups, each overriding
    the defaults). state holds each parameter's running buffers, keyed by the parameter itself, as in PyTorch."""

    def __init__(self, params, defaults):
        if isinstance(params, Tensor):
            raise TypeError(f"params given to the optimizer should be an iterable of tensors or dicts, got one tensor "
                            f"of shape {params.shape}: pass [tensor]")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        self.defaults = defaults
        self.param_groups = []
        self.state = {}
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(group)

    def add_param_group(self, group):
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"an optimizer can only optimize tensors, got a {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"cannot optimize a non-leaf tensor (shape {p.shape}): it is computed from others")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or seen & {id(p) for p in params}:
            raise ValueError("a parameter appears twice in the optimizer's parameters: it would be updated twice "
                             "per step")
        group = {**self.defaults, **group, "params": params}
        check_hyperparameters(**{k: group[k] for k in ("lr", "eps", "betas", "weight_decay", "momentum")
                                 if k in group})
        self.param_groups.append(group)

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

    # -- saving and resuming ------------------------------------------------------------------------------------
    def state_dict(self):
        """{"state": {index: {name: tensor or number}}, "param_groups": [{hyper-parameters, "params": [index]}]} with
        parameters numbered in group order, as torch.optim; the arrays are copies."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        state = {index[id(p)]: {name: Tensor(value.copy()) if backend.is_array(value) else value
                                for name, value in buffers.items()}
                 for p, buffers in self.state.items()}
        groups = [{**{k: copy.deepcopy(v) for k, v in g.items() if k != "params"},
                   "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Take the hyper-parameters and buffers of a state_dict saved from an optimizer over parameters of the same
        shapes, in the same groups."""
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"the state_dict has groups of {[len(g['params']) for g in groups]} parameters, this "
                             f"optimizer {[len(g['params']) for g in self.param_groups]}")
        params = {}
        for saved, group in zip(groups, self.param_groups):
            for i, p in zip(saved["params"], group["params"]):
                params[i] = p
            group.update({k: copy.deepcopy(v) for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, buffers in state_dict["state"].items():
            p = params[int(i)]
            self.state[p] = {name: _like(value, p, name) for name, value in buffers.items()}


def _like(value, param, name):
    """A saved buffer as an array on the parameter's device, in its dtype (a step count stays a number)."""
    array = as_array(value)
    if not backend.is_array(array):
        return value
    if tuple(array.shape) != param.shape:
        raise ValueError(f"the saved {name!r} buffer has shape {tuple(array.shape)}, its parameter {param.shape}")
    return backend.to_device(array, param.device).astype(param.dtype, copy=True)
