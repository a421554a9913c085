"""The autograd engine: Tensor, Function, the context a Function saves into, and the backward walk.

A Tensor wraps one backend array (numpy or cupy), its ``.array``. Calling a Function on Tensors runs its ``forward``
on the raw arrays and, when a gradient is wanted, records a Node: which Function ran, its context, and where each
input's gradient goes with the input's shape, dtype and device (not the input itself: an intermediate no backward
saved is freed as soon as forward is done with it). ``Tensor.backward`` then walks those nodes from the output back
to the leaves, in topological order, without recursion. Each tensor counts the in-place changes of its memory (a
version), so backward can refuse to use an array that changed after forward saved it. Operators and methods such as
``a + b`` or ``x.sum(dim=1)`` are attached by ``tinyattn.ops``.
"""
import contextlib
import threading
import weakref

from . import backend, printing

_this_thread = threading.local()        # .grad_modes: this thread's grad modes, the innermost last


# -- seams for a speed layer ----------------------------------------------------------------------------------------
# The walk runs inside walk_scope() and reads each gradient through settled(). Plainly, these do nothing; the CPU
# layer (tinyattn.cpu) installs its own when imported, so that a Function's backward may leave a product to a
# helper thread during the walk and the walk waits for it before reading it. The engine knows nothing more of it.
_walk_seams = {"walk_scope": contextlib.nullcontext, "settled": lambda grad: grad}


def install_walk_seams(walk_scope, settled):
    """Put a speed layer's versions in the backward walk: walk_scope() a context manager around each walk,
    settled(grad) the gradient once it may be read (grad may be None)."""
    _walk_seams.update(walk_scope=walk_scope, settled=settled)


def _grad_modes():
    if not hasattr(_this_thread, "grad_modes"):
        _this_thread.grad_modes = [True]
    return _this_thread.grad_modes


def is_grad_enabled():
    return _grad_modes()[-1]


class _GradMode(contextlib.ContextDecorator):
    """Context manager and decorator that switches graph recording off (no_grad) or on (enable_grad), in the
    calling thread only: another thread's forward keeps recording while one evaluates under no_grad."""

    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        _grad_modes().append(self.enabled)

    def __exit__(self, *exc):
        _grad_modes().pop()


def no_grad():
    return _GradMode(False)


def enable_grad():
    return _GradMode(True)


def inference_mode(mode=True):
    """PyTorch's faster no_grad; here exactly no_grad (inference_mode(False) records as usual)."""
    return _GradMode(not mode)


class set_grad_enabled:
    """set_grad_enabled(False) switches recording off in this thread at once; used with `with` (or as a decorator)
    it also switches it back afterwards, as torch.set_grad_enabled."""

    def __init__(self, mode):
        self.previous = is_grad_enabled()
        _grad_modes()[-1] = bool(mode)
        self.mode = bool(mode)

    def __call__(self, function):
        """As a decorator: nothing switches now; each call runs in the mode and then returns to the caller's."""
        _grad_modes()[-1] = self.previous
        return _GradMode(self.mode)(function)

    def __enter__(self):
        _grad_modes()[-1] = self.mode

    def __exit__(self, *exc):
        _grad_modes()[-1] = self.previous


class Context:
    """What a Function's forward leaves for its backward (``ctx`` in both). needs_input_grad says, input by input,
    whether a gradient will be wanted: a tensor that requires grad, while recording is on (all False under
    no_grad, as in PyTorch), so a forward can skip what only its backward would use."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self._saved = ()

    def save_for_backward(self, *arrays):
        self._saved = arrays

    @property
    def saved_tensors(self):
        return self._saved


class InputMetadata:
    """What a recorded call remembers of one input tensor once the call is made: its shape, dtype and device, enough
    to reduce its gradient to it and to name it in errors. The tensor itself is not kept, so an intermediate that no
    backward saved is freed as soon as nothing else holds it (PyTorch's graph keeps the same)."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, array):
        self.shape, self.dtype, self.device = array.shape, array.dtype, backend.device_of(array)

    def __repr__(self):
        return f"InputMetadata(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class Node:
    """One recorded Function call: the backward step that leads from its output to its inputs."""

    __slots__ = ("function", "ctx", "inputs", "edges", "saved_versions", "output_shape", "output_dtype", "retained")

    def __init__(self, function, ctx, inputs, saved_versions, output):
        self.function = function
        self.ctx = ctx
        self.inputs = [None if t is None else InputMetadata(t.array) for t in inputs]  # per positional argument
        # Where each input's gradient goes: the node that made the input, as it was at this call, or the input
        # itself for a leaf (None: no gradient wanted). An in-place change made later gives the tensor a new node;
        # this call used the old value, so its gradient must still go to the old node.
        self.edges = [None if t is None or not t._requires_grad else t._node or t for t in inputs]
        self.saved_versions = saved_versions  # (version counter, its value then, input index) per saved array
        self.output_shape, self.output_dtype = output.shape, output.dtype  # what the call made, for a picture
        self.retained = None  # a weak reference to the tensor that keeps this node's gradient (retain_grad)

    def input_gradients(self, grad):
        """(edge, gradient) for every input that wants one, each reduced to that input's shape and dtype."""
        self._check_saved_arrays()
        try:
            grads = self.function.backward(self.ctx, backend.read_only(grad))
        except ValueError as error:
            if "read-only" not in str(error):
                raise
            raise RuntimeError(
                f"{self.function.__name__}.backward wrote into a read-only array, most likely the gradient it was "
                "given: a backward must leave its grad as it is (the same array may be another input's gradient, "
                "and a helper thread may still be reading it). Compute into a new array instead.") from error
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(self.inputs):
            raise RuntimeError(f"{self.function.__name__}.backward returned {len(grads)} gradients "
                               f"for {len(self.inputs)} inputs")
        return [(edge, _sum_to_shape(parent_grad, self.inputs[i], i, self))
                for i, (edge, parent_grad) in enumerate(zip(self.edges, grads))
                if edge is not None and parent_grad is not None]

    def _check_saved_arrays(self):
        if self.ctx is None:
            raise RuntimeError(
                f"trying to backward through {self.function.__name__} a second time: its saved arrays were "
                "freed by the first backward. Pass retain_graph=True to the first backward to keep them.")
        for counter, then, index in self.saved_versions:
            if counter[0] != then:
                what = "its output" if index is None else f"input {index} of shape {self.inputs[index].shape}"
                raise RuntimeError(
                    f"one of the arrays {self.function.__name__} saved for its backward has been modified by an "
                    f"in-place operation: {what} is at version {counter[0]}, it was at version {then} when saved. "
                    "Compute it out of place, or change a clone() of it instead.")

    def release(self):
        """Free what forward saved (backward through this node again then raises)."""
        self.ctx = None

    def name(self):
        return f"{self.function.__name__}Backward"

    @property
    def next_functions(self):
        """(node, 0) for each input, as PyTorch's: the input's own node, an AccumulateGrad for a leaf that requires
        grad (where its .grad is filled in), None for an input that needs no gradient."""
        return tuple((None if edge is None else edge if isinstance(edge, Node) else AccumulateGrad(edge), 0)
                     for t, edge in zip(self.inputs, self.edges) if t is not None)

    def __repr__(self):
        return f"<{self.name()} object>"


class AccumulateGrad:
    """Where the backward walk ends for a leaf tensor: it adds the gradient into variable.grad."""

    next_functions = ()

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "AccumulateGrad"

    def __repr__(self):
        return "<AccumulateGrad object>"


class RemovableHandle:
    """What a register_*_hook returns: handle.remove() takes the hook off again."""

    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


def _held(array):
    """The array a tensor holds: NumPy gives a scalar (numpy.float32, ...) for a reduction or arithmetic on 0-d
    arrays, which cannot be written in place (s = x.sum(); s += 1); a tensor holds it as a 0-d array instead."""
    return backend.numpy.asarray(array) if isinstance(array, _NUMPY_SCALAR) else array


_NUMPY_SCALAR = backend.numpy.generic


_NDARRAY = backend.numpy.ndarray


def legacy_array(args, dtype):
    """The array PyTorch's legacy constructors (torch.Tensor, LongTensor, FloatTensor, ...) make of their arguments,
    of dtype on the default device: sizes give an uninitialised array of that shape (LongTensor(6) holds six
    elements, not the number 6; no sizes, none), one list, tuple, array or tensor gives a copy of its data."""
    device = backend.default_device()
    if all(type(n) is int for n in args):
        if any(n < 0 for n in args):
            raise RuntimeError(f"trying to create a tensor with a negative dimension: shape {args}")
        return backend.xp_for(device).empty(args or (0,), dtype=dtype)      # Tensor(): one dim of size 0
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return backend.to_device(backend.numpy.array(args[0], dtype=dtype), device)
    if len(args) == 1 and (backend.is_array(args[0]) or isinstance(args[0], Tensor)):
        return backend.to_device(as_array(args[0]).astype(dtype), device)
    raise TypeError("a legacy constructor (Tensor, LongTensor, ...) takes sizes (ints) or one list, tuple, array or "
                    f"tensor of data; got {', '.join(type(a).__name__ for a in args)}")


def _is_float(dtype):
    return dtype.kind == "f"


class Tensor:
    """An n-dimensional array on a device, with an optional gradient."""

    __array_priority__ = 1000  # numpy_array + tensor defers to Tensor.__radd__
    _is_view = False           # True for the result of an op that views its input's memory (reshape, a slice, ...)
    _base = None               # for a view made by basic indexing: (the tensor it views, the index)
    _post_accumulate_grad_hooks = None   # {key: hook} once register_post_accumulate_grad_hook is called

    def __init__(self, *data, requires_grad=False):
        """Tensor(array) holds a NumPy or CuPy array (the engine's own use). PyTorch's legacy forms read as PyTorch
        reads them: Tensor(2, 3) a new uninitialised (2, 3) tensor, Tensor([1, 2]) that data, Tensor() an empty one,
        of the default float dtype."""
        # The engine's own Tensor(ndarray), which every op's result comes through, is told apart first and cheapest.
        if len(data) != 1 or type(data[0]) is not _NDARRAY and (type(data[0]) in (int, list, tuple)
                                                                 or isinstance(data[0], Tensor)):
            data = (legacy_array(data, backend.get_default_dtype()),)
        self.array = _held(data[0])
        self.grad = None
        self._node = None
        self._versions = [0]     # how often its memory was changed in place; shared with the tensors viewing it
        self._requires_grad = False
        if requires_grad:
            self.requires_grad = True

    # -- attributes ---------------------------------------------------------------------------
    @property
    def data(self):
        """The same values as a tensor outside the graph, sharing memory (PyTorch's .data); .array is the raw array."""
        return Tensor(self.array)

    @data.setter
    def data(self, value):
        self.array = _held(as_array(value))

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if self._node is not None:
            raise RuntimeError(f"you can only change requires_grad flags of leaf tensors; this one (shape "
                               f"{self.shape}) is computed by {self._node.name()}. To use it in a computation that "
                               "needs no gradient, use its detach()")
        if flag and not _is_float(self.array.dtype):
            raise RuntimeError(f"only floating-point tensors can require gradients, got dtype {self.array.dtype}")
        self._requires_grad = bool(flag)

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return self.array.dtype

    @property
    def device(self):
        """Where the tensor lives, a tinyattn.device (it equals "cpu" or "cuda", as strings, too)."""
        return backend.device("cuda", 0) if backend.is_cupy_array(self.array) else backend.device("cpu")

    @property
    def is_cuda(self):
        return backend.is_cupy_array(self.array)

    @property
    def ndim(self):
        return self.array.ndim

    @property
    def is_leaf(self):
        return self._node is None

    @property
    def _version(self):
        """How many in-place changes its memory has seen (PyTorch's x._version)."""
        return self._versions[0]

    def _mark_modified(self):
        """Record that its array was changed in place: backward through a Function that saved it then raises."""
        self._versions[0] += 1

    @property
    def grad_fn(self):
        """The recorded call that made this tensor (None for a leaf); its next_functions lead to its inputs'."""
        return self._node

    def dim(self):
        return self.array.ndim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return int(self.array.size)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        grad = f"grad_fn=<{self._node.name()}>" if self._node is not None else \
            "requires_grad=True" if self.requires_grad else None
        return printing.tensor_repr(self.array, str(self.device), grad)

    def __format__(self, spec):
        """f"{loss:.4f}" formats a one-element tensor as its number, as in PyTorch."""
        return format(self.item(), spec) if self.array.size == 1 and spec else repr(self) if not spec else \
            format(repr(self), spec)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors of one element can be used as an index, got dtype {self.dtype}")
        return int(self.item())

    def __array__(self, dtype=None, copy=None):
        """np.asarray(tensor) gives its values as a NumPy array (a copy from the GPU)."""
        values = backend.to_host(self.array)
        return values if dtype is None else values.astype(dtype)

    # -- leaving the graph or the device ------------------------------------------------------
    def numpy(self):
        """Its values as a NumPy array: on the CPU the tensor's own memory, as in PyTorch (changing one changes the
        other); on the GPU a copy on the host."""
        return backend.to_host(self.array)

    def item(self):
        if self.array.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.array.reshape(()).item()

    def tolist(self):
        return backend.to_host(self.array).tolist()

    def detach(self):
        """The same data, cut from the graph. Unlike .data it counts in-place changes with this tensor, as in
        PyTorch: changing it in place makes a backward that saved this tensor raise."""
        detached = Tensor(self.array)
        detached._versions = self._versions
        return detached

    def retain_grad(self):
        """Keep .grad on this non-leaf tensor after backward (leaves always keep theirs)."""
        if self._node is not None:
            self._node.retained = weakref.ref(self)
        return self

    def _take_history(self, node):
        """Become the output of node (an in-place change): later uses of this tensor lead back through node, and
        .grad is still kept if retain_grad() asked for it."""
        if self._node is not None and self._node.retained is not None and node is not None:
            node.retained, self._node.retained = self._node.retained, None
        self._node = node
        self._requires_grad = node is not None       # a computed tensor requires grad; one with no history is a leaf

    # -- the backward walk --------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=False, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into the .grad of every leaf that requires grad, or, given inputs (tensors),
        into theirs alone, as PyTorch's inputs= does.

        The walk goes through nodes (recorded calls) and ends at leaf tensors. Each node that leads here is
        visited once, after every node that uses its output (topological order), so its gradient is complete when
        it passes it on to its inputs.
        """
        if create_graph:
            raise NotImplementedError("create_graph=True (gradients of gradients) is not supported: backward "
                                      "functions run on raw arrays, outside the graph")
        only = None if inputs is None else {id(t._node or t): t
                                            for t in ((inputs,) if isinstance(inputs, Tensor) else inputs)}
        start = self._node or self
        pending = {id(start): _output_gradient(self, gradient)}  # gradients not yet passed on, by node or leaf
        settled = _walk_seams["settled"]
        with _walk_seams["walk_scope"]():
            for step in _walk_order(start):
                grad = settled(pending.pop(id(step), None))
                if grad is None:
                    continue
                is_leaf = type(step) is not Node
                keeper = step if is_leaf else step.retained and step.retained()   # the tensor whose .grad this is
                if only is not None:
                    keeper = only.get(id(step))
                if keeper is not None:
                    keeper._accumulate_grad(grad)
                if is_leaf:
                    if keeper is not None and keeper._post_accumulate_grad_hooks:
                        for hook in tuple(keeper._post_accumulate_grad_hooks.values()):
                            hook(keeper)
                    continue
                for edge, edge_grad in step.input_gradients(grad):
                    # Out of place: a backward may hand the same array to several inputs.
                    pending[id(edge)] = (edge_grad if id(edge) not in pending
                                         else settled(pending[id(edge)]) + settled(edge_grad))
                if not retain_graph:
                    step.release()

    def register_post_accumulate_grad_hook(self, hook):
        """hook(tensor) runs in backward as soon as this leaf's .grad is final for that backward, while the walk goes
        on to the rest of the graph (as PyTorch's): data parallel training starts averaging a gradient there."""
        if self._node is not None:
            raise RuntimeError(f"post accumulate grad hooks cannot be registered on non-leaf tensors (this one, of "
                               f"shape {self.shape}, is computed by {self._node.name()})")
        if self._post_accumulate_grad_hooks is None:
            self._post_accumulate_grad_hooks = {}
        key = object()
        self._post_accumulate_grad_hooks[key] = hook
        return RemovableHandle(self._post_accumulate_grad_hooks, key)

    def _accumulate_grad(self, grad):
        if self.grad is None:
            self.grad = Tensor(grad.copy())  # a copy: optimisers may change .grad in place
        else:
            self.grad.array = _held(self.grad.array + grad)
            self.grad._mark_modified()


def _output_gradient(output, gradient):
    """The gradient backward starts from: ones for a one-element output, else the one given, checked."""
    if not output.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad (and has no grad_fn)")
    if gradient is None:
        if output.array.size != 1:
            raise RuntimeError(f"backward() without a gradient needs a one-element output, got shape {output.shape}")
        return backend.xp_of(output.array).ones_like(output.array)
    gradient = as_array(gradient)
    if tuple(gradient.shape) != output.shape:
        raise RuntimeError(f"gradient shape {tuple(gradient.shape)} does not match output shape {output.shape}")
    return gradient


def _walk_order(root):
    """The steps in the order the walk visits them: each node after every node that uses its output (the reversed
    topological order), and a leaf with post-accumulate-grad hooks right after the last node that uses it, so that
    its gradient is final and its hooks run while the walk goes on, not at its end."""
    order = _topological_order(root)
    hooked = {id(step): 0 for step in order if type(step) is not Node and step._post_accumulate_grad_hooks}
    if not hooked:
        return reversed(order)
    for step in order:                      # count the uses of each hooked leaf
        if type(step) is Node:
            for edge in step.edges:
                if id(edge) in hooked:
                    hooked[id(edge)] += 1
    walk = []
    for step in reversed(order):
        if id(step) in hooked and step is not root:
            continue
        walk.append(step)
        if type(step) is Node:
            for edge in step.edges:
                if id(edge) in hooked:
                    hooked[id(edge)] -= 1
                    if hooked[id(edge)] == 0:
                        walk.append(edge)
    return walk


def _topological_order(root):
    """The nodes and leaf tensors that lead to root (a node or a leaf), each after all of its edges (iterative
    depth-first search)."""
    order, expanded = [], set()
    stack = [(root, False)]
    while stack:
        step, edges_done = stack.pop()
        if edges_done:
            order.append(step)
            continue
        # Mark on expansion, not on push: a step reached again later must still finish before its consumers.
        if id(step) in expanded:
            continue
        expanded.add(id(step))
        stack.append((step, True))
        if type(step) is Node:
            stack += [(edge, False) for edge in step.edges if edge is not None and id(edge) not in expanded]
    return order


def _sum_to_shape(grad, parent, index, node):
    """The gradient for input `index` reduced to that input's shape (parent: its InputMetadata; the one place
    broadcast gradients are summed back) and dtype. A gradient that does not broadcast to the input is an error, even
    one of the same size (a transposed gradient of a (5, 4) input is (4, 5): reshaping it would hide the bug)."""
    shape = parent.shape
    if grad.shape != shape:
        extra = grad.ndim - len(shape)
        fits = extra >= 0 and all(g == s or s == 1 for g, s in zip(grad.shape[extra:], shape))
        if not fits:
            raise RuntimeError(f"{node.function.__name__}.backward returned a gradient of shape {tuple(grad.shape)} "
                               f"for its input {index} of shape {shape}: it must have that shape or broadcast to it")
        axes = tuple(range(extra)) + tuple(extra + i for i, size in enumerate(shape)
                                           if size == 1 and grad.shape[extra + i] != 1)
        grad = grad.sum(axis=axes, keepdims=True).reshape(shape)
    dtype = parent.dtype
    return grad if grad.dtype == dtype else grad.astype(dtype)


class Function:
    """An operation with a hand-written backward, in the style of torch.autograd.Function.

    Subclasses define static ``forward(ctx, *args, **kwargs)`` and ``backward(ctx, grad)`` on raw backend arrays.
    ``backward`` returns one gradient per positional argument of ``forward`` (None where there is none); gradients
    may keep broadcast shapes, the engine sums them back to each input's shape.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward on the raw arrays of args and, when a gradient is wanted, record the call for backward."""
        arrays = [as_array(a) for a in args]
        _check_one_device(cls, arrays)
        recording = is_grad_enabled()                          # under no_grad no input needs a gradient
        ctx = Context(tuple(recording and isinstance(a, Tensor) and a.requires_grad for a in args))
        output = cls.forward(ctx, *arrays, **kwargs)
        result = Tensor(output)
        inputs = [a if isinstance(a, Tensor) else None for a in args]
        _share_versions_with_viewed_input(result, inputs)
        if any(ctx.needs_input_grad) and _is_float(output.dtype):
            result._requires_grad = True
            result._node = Node(cls, ctx, inputs, _saved_versions(ctx.saved_tensors, inputs, result), result)
        return result


def _memory_owner(array):
    """The array that owns an array's memory (itself, or the base a view looks into)."""
    base = getattr(array, "base", None)
    return array if base is None else base


def _share_versions_with_viewed_input(result, inputs):
    """A result that views an input's memory (reshape, transpose, a slice) counts in-place changes with it."""
    owner = _memory_owner(result.array)
    for t in inputs:
        if t is not None and _memory_owner(t.array) is owner:
            result._versions, result._is_view = t._versions, True
            return


def _saved_versions(saved, inputs, result):
    """(version counter, version now, input index or None for the output) for each input and the result whose
    memory forward saved: backward checks that none was changed in place since."""
    if not saved:
        return ()
    owners = {id(_memory_owner(a)) for a in saved if backend.is_array(a)}
    found = [(t._versions, t._versions[0], i) for i, t in enumerate(inputs)
             if t is not None and id(_memory_owner(t.array)) in owners]
    if id(_memory_owner(result.array)) in owners:
        found.append((result._versions, result._versions[0], None))
    return tuple(found)


def _check_one_device(function, arrays):
    """Tensors' arrays and raw arrays (masks, indices) alike: CuPy would fail on a NumPy operand with a TypeError that
    names neither device."""
    on_gpu = [backend.is_cupy_array(a) for a in arrays if backend.is_array(a)]
    if any(on_gpu) and not all(on_gpu):
        raise RuntimeError(f"{function.__name__} got inputs on different devices: "
                           + ", ".join(f"{backend.device_of(a)} {tuple(a.shape)}" for a in arrays
                                       if backend.is_array(a)))


def as_array(x):
    """The raw array of a Tensor; anything else (an array, a mask, ids, a number) as it is."""
    return x.array if isinstance(x, Tensor) else x
