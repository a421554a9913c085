"""Module, Parameter and the containers, as in torch.nn.

Assigning a Parameter or a Module to an attribute registers it, so parameters(), state_dict() and to() find
everything without a list kept by hand.
"""
from collections import OrderedDict, namedtuple

from .. import backend
from ..ops import to_args
from ..tensor import RemovableHandle, Tensor, as_array


class Parameter(Tensor):
    """A Tensor that is a module's learnable weight: requires grad by default and is registered on assignment."""

    def __init__(self, data, requires_grad=True):
        super().__init__(as_array(data), requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            changed = hook(self, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        output = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            changed = hook(self, args, output)
            if changed is not None:
                output = changed
        return output

    def register_forward_hook(self, hook):
        """hook(module, inputs, output) after every forward (a returned value replaces the output)."""
        key = object()
        self._forward_hooks[key] = hook
        return RemovableHandle(self._forward_hooks, key)

    def register_forward_pre_hook(self, hook):
        """hook(module, inputs) before every forward (a returned value replaces the inputs)."""
        key = object()
        self._forward_pre_hooks[key] = hook
        return RemovableHandle(self._forward_pre_hooks, key)

    # -- registration -------------------------------------------------------------------------
    def __setattr__(self, name, value):
        """PyTorch's rules: a Parameter registers as a parameter and a Module as a child, each keeping its place in
        the order when it replaces one of the same name (code that pairs parameters by position, an optimizer's
        state or a checkpoint read elsewhere, stays right); a name that holds a parameter, a child or a buffer takes
        only a value of its kind, or None; anything else is a plain attribute."""
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning "
                                 f"{name!r}")
        if isinstance(value, Parameter):
            self._forget(name, keep=self._parameters)
            self._parameters[name] = value
        elif name in self._parameters:
            _check_kind(value, None, "parameter", name, "tinyattn.nn.Parameter or None")
            self._parameters[name] = None
        elif isinstance(value, Module):
            self._forget(name, keep=self._modules)
            self._modules[name] = value
        elif name in self._modules:
            _check_kind(value, None, "child module", name, "tinyattn.nn.Module or None")
            self._modules[name] = None
        elif name in self._buffers:
            _check_kind(value, Tensor, "buffer", name, "tinyattn.Tensor or None")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name, keep):
        """Take name out of every registry but keep (and out of the plain attributes), so one place holds it."""
        for registry in (self._parameters, self._modules, self._buffers):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent.discard(name)
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for registry in ("_parameters", "_modules", "_buffers"):
            table = self.__dict__.get(registry)
            if table is not None and name in table:
                return table[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name):
        for registry in (self._parameters, self._modules, self._buffers):
            if name in registry:
                del registry[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def _check_new_name(self, name, kind):
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"{kind} name {name!r} can't be empty or contain \".\"")
        if hasattr(self, name) and name not in (self._parameters if kind == "parameter" else self._buffers):
            raise KeyError(f"attribute {name!r} already exists")

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that belongs to the module's state (moved by to(), saved if persistent) but is not learned."""
        self._check_new_name(name, "buffer")
        _check_kind(tensor, Tensor, "buffer", name, "tinyattn.Tensor or None")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def register_parameter(self, name, param):
        """Register param (a Parameter, or None for an optional one that is absent, as a bias=False layer's)."""
        self._check_new_name(name, "parameter")
        _check_kind(param, Parameter, "parameter", name, "tinyattn.nn.Parameter or None")
        if param is not None and not param.is_leaf:
            raise ValueError(f"cannot register a non-leaf tensor (shape {param.shape}) as parameter {name!r}: it is "
                             "computed from others. Use a Parameter made from its detach()")
        self._parameters[name] = param

    # -- walking the tree ---------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(name, module) for this module and every module under it, depth first. A module reachable under two names
        (nn.Sequential(a, a), layers shared across depth) is listed once, under its first name, unless
        remove_duplicate=False, as PyTorch's; memo: modules already listed (skipped)."""
        memo = set() if memo is None else memo
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        """(name, child) for each child module (a name set to None holds none)."""
        return ((name, child) for name, child in self._modules.items() if child is not None)

    def children(self):
        return (child for _, child in self.named_children())

    def named_parameters(self, prefix="", recurse=True):
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for module_name, module in modules:
            for name, p in module._parameters.items():
                if p is not None and id(p) not in seen:  # a tied weight is listed once
                    seen.add(id(p))
                    yield (f"{module_name}.{name}" if module_name else name), p

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix=""):
        seen = set()
        for module_name, module in self.named_modules(prefix=prefix):
            for name, b in module._buffers.items():
                if b is not None and id(b) not in seen:  # a shared buffer is listed once
                    seen.add(id(b))
                    yield (f"{module_name}.{name}" if module_name else name), b

    def buffers(self):
        return (b for _, b in self.named_buffers())

    def num_parameters(self, trainable_only=False):
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def apply(self, fn):
        for module in self.modules():
            fn(module)
        return self

    # -- modes, gradients, devices ------------------------------------------------------------
    def train(self, mode=True):
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.array[...] = 0

    def requires_grad_(self, flag=True):
        for p in self.parameters():
            p.requires_grad = flag
        return self

    def to(self, *args, dtype=None, device=None, non_blocking=False):
        """Move (and/or cast) every parameter and buffer in place and return the module, in PyTorch's forms:
        module.to(device), module.to("cuda"), module.to(float64), module.to(device, dtype), module.to(tensor)."""
        dtype, device, _ = to_args(args, dtype, device, non_blocking)
        if dtype is not None and dtype.kind != "f":
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")

        def convert(array):                 # dtype changes floating arrays only, as PyTorch's
            if device is not None:
                array = backend.to_device(array, device)
            if dtype is not None and array.dtype.kind == "f":
                array = array.astype(dtype)
            return array

        for module in self.modules():
            for p in module._parameters.values():
                if p is not None:
                    p.array = convert(p.array)
                    if p.grad is not None:
                        p.grad.array = convert(p.grad.array)
            for name, b in module._buffers.items():
                if b is not None:
                    module._buffers[name] = Tensor(convert(b.array))
        return self

    def double(self):
        return self.to(dtype=backend.float64)

    def float(self):
        return self.to(dtype=backend.float32)

    def cuda(self):
        return self.to("cuda")

    def cpu(self):
        return self.to("cpu")

    # -- state --------------------------------------------------------------------------------
    def state_dict(self):
        """Name -> detached tensor, for every parameter and persistent buffer (tied weights appear once per name)."""
        state = OrderedDict()
        for module_name, module in self.named_modules(remove_duplicate=False):     # a shared module under each name
            prefix = f"{module_name}." if module_name else ""
            for name, p in module._parameters.items():
                if p is not None:
                    state[prefix + name] = p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    state[prefix + name] = b.detach()
        return state

    def load_state_dict(self, state_dict, strict=True):
        """Copy values in place; with strict, every missing key, unexpected key and shape mismatch is named."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mismatched = [f"{k}: checkpoint {tuple(state_dict[k].shape)} vs model {own[k].shape}"
                      for k in own if k in state_dict and tuple(state_dict[k].shape) != own[k].shape]
        problems = []
        if mismatched:
            problems.append("shape mismatch for " + "; ".join(mismatched))
        if strict and missing:
            problems.append("missing keys: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(unexpected))
        if problems:
            raise RuntimeError(f"error loading state_dict into {type(self).__name__}: " + " | ".join(problems))
        targets = dict(self._state_targets())
        for key, value in state_dict.items():
            if key in targets:
                target = targets[key]
                data = as_array(value)
                target.array = backend.to_device(backend.xp_of(data).asarray(data, dtype=target.dtype),
                                                target.device).copy()
        return IncompatibleKeys(missing, unexpected)

    def _state_targets(self):
        for module_name, module in self.named_modules(remove_duplicate=False):
            prefix = f"{module_name}." if module_name else ""
            for name, t in list(module._parameters.items()) + list(module._buffers.items()):
                if t is not None:
                    yield prefix + name, t

    # -- printing -----------------------------------------------------------------------------
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ") for name, child in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _check_kind(value, kind, role, name, expected):
    """TypeError, as PyTorch's, when value (not None) is not of kind (None: only None is accepted)."""
    if value is not None and (kind is None or not isinstance(value, kind)):
        what = f"a {type(value).__name__}" + (f" of shape {value.shape}" if isinstance(value, Tensor) else "")
        raise TypeError(f"cannot assign {what} as {role} {name!r} ({expected} expected)")


def _checked_module(module, container, place):
    if not isinstance(module, Module):
        raise TypeError(f"{container} takes tinyattn modules; {place} is a {type(module).__name__}")
    return module


class ModuleList(Module):
    """A list of modules, registered under their positions ("0", "1", ...)."""

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def append(self, module):
        setattr(self, str(len(self._modules)), _checked_module(module, type(self).__name__, f"item {len(self)}"))
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        modules = list(self._modules.values())
        modules.insert(index, _checked_module(module, type(self).__name__, f"item {index}"))
        self._modules.clear()
        return self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(list(self._modules.values())[i]) if type(self) is ModuleList else \
                Sequential(*list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(ModuleList):
    """Modules applied one after the other: Sequential(a, b, c)(x) == c(b(a(x))); Sequential(OrderedDict(name=a,
    ...)) names them."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, module in modules[0].items():
                setattr(self, name, _checked_module(module, "Sequential", f"{name!r}"))
        else:
            self.extend(modules)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x


class ModuleDict(Module):
    """Modules by name, as torch.nn.ModuleDict: registered, so parameters() and state_dict() find them."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, name):
        return self._modules[name]

    def __setitem__(self, name, module):
        setattr(self, name, _checked_module(module, "ModuleDict", f"{name!r}"))

    def __delitem__(self, name):
        del self._modules[name]

    def __contains__(self, name):
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
        for name, module in (modules.items() if hasattr(modules, "items") else modules):
            self[name] = module
