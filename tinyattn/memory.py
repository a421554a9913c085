"""What every backward keeps: `ta.memory_report(loss)` walks the graph behind a tensor, before backward() frees it,
and lists each array a Function's ctx holds for its backward.

    with memory.track_modules(model) as modules:        # optional: which module made each Function call
        loss = model(ids, targets)[1]
    print(ta.memory_report(loss, modules))

An array is reachable from a ctx when save_for_backward was given it or when it is an attribute of ctx (looked for
inside tuples, lists and dicts). It is named by that attribute, or by the name backward unpacks it into
(`q, k, v, out, L, mask = ctx.saved_tensors` names the sixth "mask"; "saved[5]" where backward does not unpack
them), and each row says what backward reads it for (WHY). Memory is counted once, by the array that owns it (a view
keeps its whole base alive): a second holder gets a row of 0 bytes that says who counted it, and views of one buffer
(q, k and v split from one projection) say so. That is all the graph keeps alive: a node keeps of its inputs only
their shapes, dtypes and devices, so an intermediate that no ctx saved is freed once forward is done with it. Memory
that belongs to a leaf tensor the graph leads to (a parameter, an input that requires grad) lives on whatever the
graph does; it is reported apart and left out of the total. Nothing is recorded while a model runs unless
track_modules is on, so the report costs nothing until asked for."""
import ast
import contextlib
import functools
import inspect
import textwrap

from . import backend
from .tensor import Tensor

OUTSIDE = "(no module)"

# What each backward reads a kept array for, by the name it is kept under; "Family.name" where one family's use of a
# name differs (the family: the op's name without Fast, Reference or Fused; s is attention's scale, g the gradient
# that comes in, P the attention weights). A Function's own class attribute WHY (a dict of the same kind, found
# through its bases) comes first: a new Function writes its phrases there, beside its backward. A name found nowhere
# says "(no reason recorded)".
WHY = {
    "x": "the input: the derivative is taken at x",
    "a": "first operand: the gradients' formulas read it (b's in a product)",
    "b": "second operand: the gradients' formulas read it (a's in a product)",
    "out": "the output, in which the derivative is written (exp: out; tanh: 1 - out^2)",
    "saved": "an operand: each one's gradient is an einsum of g with the others",
    "low": "the lower bound: the gradient passes only inside the bounds",
    "high": "the upper bound: the gradient passes only inside the bounds",
    "MaxOrMin.x": "the input: g goes where it equals out",
    "MaxOrMin.out": "the max or min: g goes where x equals it",
    "index": "which elements were taken: g goes back there",
    "indices": "where each max or min was: g goes there",
    "condition": "which input each element came from: g goes to that one",
    "mask": "where the fill went: no gradient there",
    "centred": "x - mean: dx = 2 g (x - mean) / (n - correction)",
    "norm": "the norm: dx = g x |x|^(p-2) / norm^(p-1)",
    "keep": "the elements dropout kept: g passes there only, scaled by 1 / (1 - p)",
    "y": "softmax's output: dx = y (g - sum(g y))",
    "LogSoftmax.y": "log-softmax's output: dx = g - exp(y) sum(g)",
    "ids": "the token ids: g is added to the weight's rows they index",
    "log_p": "log-softmax of the logits: dlogits = softmax - one-hot",
    "target": "the classes: where the one-hot's 1 goes",
    "valid": "the targets that are not ignore_index: only they get a gradient",
    "count": "how many targets count: the mean's divisor",
    "weight": "the weight: dx reads it",
    "Linear.weight": "W: dx = g W",
    "Linear.x": "the input: dW = g^T x",
    "Linear.rows": "the input as rows: dW = g^T rows",
    "LayerNorm.weight": "gamma: dx reads g gamma",
    "RMSNorm.weight": "gamma: dx reads g gamma",
    "normed": "x normalised: dgamma = sum(g x_hat), and dx",
    "rstd": "1 / std per row: dx = rstd (g_hat - mean(g_hat) - x_hat mean(g_hat x_hat)), g_hat = g gamma",
    "RMSNorm.rstd": "1 / rms per row: dx = rstd (g_hat - x_hat mean(g_hat x_hat)), g_hat = g gamma",
    "q": "Q: dK = s dS^T Q",
    "k": "K: dQ = s dS K",
    "FlashAttention.q": "Q: dK = s dS^T Q, and the scores recomputed",
    "FlashAttention.k": "K: dQ = s dS K, and the scores recomputed",
    "v": "V: dP = dO V^T",
    "p": "P: dV = P^T dO, dS = P (dP - D)",
    "probs": "P of one part of the rows: dV = P^T dO, dS = P (dP - D)",
    "ScaledDotProductAttention.out": "O: D = rowsum(dO O), for dS",
    "FlashAttention.out": "O: D = rowsum(dO O), for dS",
    "FlashAttention.mask": "the attention mask, applied again to the recomputed scores",
    "L": "log-sum-exp per query row: P = exp(S - L) recomputed, block by block",
    "minus_m": "-m, each row's shift: with Q, [s Q, -m] made again to recompute P = exp(S - m) / l",
    "row_sum_inverse": "1 / l per row: with the rows' shifts, P recomputed exactly",
    "q3": "Q as the CUDA kernel reads it: dK = s dS^T Q",
    "k3": "K as the CUDA kernel reads it: the scores recomputed, and dQ",
    "v3": "V as the CUDA kernel reads it: dP = dO V^T",
    "lse": "log-sum-exp per query row: P = exp(S - L) recomputed",
    "AdditiveScores.f": "tanh(q + k) per pair: dv = sum(g f), and tanh's derivative 1 - f^2",
    "AdditiveScores.v": "the scoring vector v: d(q + k) = g v (1 - f^2)",
    "h": "the previous hidden state: dz = g (h - n), and dW_hh",
    "r": "the reset gate: dn reaches h_n through r",
    "z": "the update gate: dh = g z, and dz",
    "n": "the candidate state: dz = g (h - n), and tanh's derivative 1 - n^2",
    "h_n": "W_hn h + b_hn: dr reads it",
    "w_hh": "the recurrent weights: dh = d_gh W_hh",
    "padded": "the padded input: dW correlates it with g",
    "cols": "the input unfolded to columns: dW = g cols^T",
}


def why(function, name):
    """What function's backward reads the array kept as name for (its WHY, then this module's); a subscript ([0],
    ['key']) is left out."""
    base = name.split("[", 1)[0]
    if base in getattr(function, "WHY", {}):
        return function.WHY[base]
    family = function.__name__.removeprefix("Fast").removeprefix("Reference").removeprefix("Fused")
    return WHY.get(f"{family}.{base}", WHY.get(base, "(no reason recorded)"))


@functools.lru_cache(maxsize=None)
def _saved_names(function):
    """The names a Function's backward unpacks ctx.saved_tensors into, or () where it does not unpack them."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function.backward)))
    except (OSError, TypeError, SyntaxError):      # no source to read (a Function built at run time)
        return ()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "saved_tensors" and isinstance(node.targets[0], (ast.Tuple, ast.List))):
            return tuple(t.id if isinstance(t, ast.Name) else
                         "*" + t.value.id if isinstance(t, ast.Starred) and isinstance(t.value, ast.Name) else None
                         for t in node.targets[0].elts)
    return ()


def _names_of_saved(function, count):
    """A name for each of count saved arrays: the one backward unpacks it into, "probs[0]" for the first taken by
    a starred name (*probs), "saved[i]" where backward gives none."""
    names = _saved_names(function)
    starred = [i for i, name in enumerate(names) if name and name.startswith("*")]
    if starred:
        i, rest = starred[0], count - len(names) + 1
        names = names[:i] + tuple(f"{names[i][1:]}[{j}]" for j in range(rest)) + names[i + 1:]
    return [names[i] if i < len(names) and names[i] else f"saved[{i}]" for i in range(count)]


def _arrays(value, name):
    """(name, array) for every array in value, looking inside tuples, lists and dicts."""
    if backend.is_array(value):
        yield name, value
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _arrays(item, f"{name}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _arrays(item, f"{name}[{key!r}]")


def kept_arrays(function, ctx):
    """(name, array) for every array that ctx keeps for function's backward."""
    saved = ctx.saved_tensors
    for name, value in zip(_names_of_saved(function, len(saved)), saved):
        yield from _arrays(value, name)
    for attribute, value in vars(ctx).items():
        if attribute not in ("_saved", "needs_input_grad"):
            yield from _arrays(value, attribute)


def _owner(array):
    base = getattr(array, "base", None)
    return array if base is None else base


def _nodes(output):
    """Every node behind output, each once, in the order forward made them (each after the nodes it reads)."""
    order, expanded, stack = [], set(), [(output.grad_fn, False)]
    while stack:
        node, inputs_done = stack.pop()
        if inputs_done:
            order.append(node)
        elif node is not None and not isinstance(node, Tensor) and id(node) not in expanded:
            expanded.add(id(node))
            stack.append((node, True))
            stack += [(edge, False) for edge in reversed(node.edges)]
    return order


def _tensors(value):
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


@contextlib.contextmanager
def track_modules(model):
    """Within the block, note which of model's modules (by its name in named_modules) made each Function call; yields
    the notes for memory_report. A call belongs to the innermost module whose forward made it: when a module's
    forward returns, the calls between its tensor arguments and its output not yet claimed by a module inside it
    are its own (arguments passed by keyword are not seen, so calls made before one may land in that module)."""
    owners, started, handles = {}, {}, []

    def before(name):
        def hook(module, args):
            started.setdefault(name, []).append({id(t.grad_fn) for t in _tensors(args) if t.grad_fn is not None})
        return hook

    def after(name):
        def hook(module, args, output):
            seen = started[name].pop()                 # walk back to the arguments, through inner modules' calls
            stack = [t.grad_fn for t in _tensors(output)]
            while stack:
                node = stack.pop()
                if node is None or isinstance(node, Tensor) or id(node) in seen:
                    continue
                seen.add(id(node))
                owners.setdefault(id(node), (node, name))  # the node itself is kept, so its id cannot be reused
                stack += node.edges
        return hook

    for name, module in model.named_modules():
        name = name or type(model).__name__
        handles += [module.register_forward_pre_hook(before(name)), module.register_forward_hook(after(name))]
    try:
        yield owners
    finally:
        for handle in handles:
            handle.remove()


class MemoryReport:
    """rows: one dict per array a ctx keeps (op, call, module, name, shape, dtype, bytes, leaf, counted_at, why,
    buffer: the viewed buffer's id, shape and this view's bytes, or None).
    total_bytes: all that the graph alone keeps alive; leaf_bytes: kept arrays that are leaf tensors' memory, alive
    anyway."""

    def __init__(self, rows, freed):
        self.rows, self.freed = rows, freed
        self.total_bytes = sum(row["bytes"] for row in rows if not row["leaf"])
        self.leaf_bytes = sum(row["bytes"] for row in rows if row["leaf"])

    def _per(self, key):
        table = {}
        for row in self.rows:
            entry = table.setdefault(row[key], {"calls": set(), "saved": 0, "leaves": 0})
            entry["calls"].add(row["call"])
            entry["leaves" if row["leaf"] else "saved"] += row["bytes"]
        return {name: {"calls": len(e["calls"]), "saved_bytes": e["saved"], "leaf_bytes": e["leaves"]}
                for name, e in sorted(table.items(), key=lambda item: -item[1]["saved"])}

    def per_op(self):
        """{op: {"calls", "saved_bytes", "leaf_bytes"}}, heaviest first."""
        return self._per("op")

    def per_module(self):
        """The same per module (OUTSIDE for calls made in no module, or where modules were not tracked)."""
        return self._per("module")

    def arrays(self, op=None):
        """The rows of one op, or all of them."""
        return [row for row in self.rows if op is None or row["op"] == op]

    def _sharing(self, row):
        """How row's memory is shared: a view of a buffer other rows view too (counted once, at the first of them),
        or an array another row counted; "" for memory of its own."""
        buffer, shape, view_bytes = row["buffer"] or (None, None, None)
        others = sorted({r["name"] for r in self.rows if r is not row and r["buffer"] and r["buffer"][0] == buffer})
        if buffer is None or not others and view_bytes == row["bytes"]:      # its own memory, or a reshape of it
            return f"(counted at {row['counted_at']})" if row["counted_at"] else ""
        if row["counted_at"]:
            return f"(a view of the {shape} buffer counted at {row['counted_at']})"
        others = [name for name in others if name != row["name"]]
        sharers = f" that {', '.join(others)} view{'s' * (len(others) == 1)} too" if others else ""
        return f"(a view of a {shape} buffer{sharers}: its {readable(row['bytes'])} counted once, here)"

    def table(self, arrays=True):
        """The report as text: per op, per module (where tracked), then (arrays=True) every array a ctx keeps, with
        what backward reads it for."""
        def lines_of(title, per):
            return [f"{title:36s} {'calls':>5s} {'saved':>10s} {'leaves':>10s}"] + [
                f"{name:36s} {e['calls']:5d} {readable(e['saved_bytes']):>10s} {readable(e['leaf_bytes']):>10s}"
                for name, e in per.items()]
        lines = lines_of("op", self.per_op()) + [
            "(saved: what the graph alone keeps alive. leaves: the parameters and inputs it holds, such as the weights",
            " the arrays below mark \"a leaf's\": alive without the graph, so counted apart and in no total)"]
        modules = self.per_module()
        if list(modules) != [OUTSIDE]:
            lines += [""] + lines_of("module", modules)
        if arrays:
            lines += ["", f"{'op':36s} {'saved array':16s} {'shape':22s} {'dtype':8s} {'bytes':>10s}"]
            for row in self.arrays():
                note = " ".join(filter(None, [row["why"], "(a leaf's)" if row["leaf"] else "", self._sharing(row)]))
                lines.append(f"{row['op']:36s} {row['name']:16s} {str(row['shape']):22s} {row['dtype']:8s} "
                             f"{readable(row['bytes']):>10s}  {note}")
        lines.append(f"the graph keeps {readable(self.total_bytes)} ({self.total_bytes:,} bytes) for backward in "
                     f"{len({row['call'] for row in self.rows})} calls; besides {readable(self.leaf_bytes)} of leaf "
                     "tensors"
                     + (f"; {self.freed} calls already freed by a backward" if self.freed else ""))
        return "\n".join(lines)

    def __str__(self):
        return self.table()

    def __repr__(self):
        return f"<MemoryReport: {self.total_bytes:,} bytes kept by the graph for backward>"


def readable(n):
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def memory_report(output, modules=None):
    """What every Function behind output keeps for its backward, as a MemoryReport. modules: what track_modules
    yielded while output was computed (then each row names its module)."""
    if not isinstance(output, Tensor) or output.grad_fn is None:
        raise ValueError("memory_report needs a tensor that a recorded Function made (one with a grad_fn); got "
                         + (f"a tensor with no graph, shape {output.shape}" if isinstance(output, Tensor)
                            else type(output).__name__))
    nodes = _nodes(output)
    leaves = {id(_owner(edge.array)) for node in nodes for edge in node.edges if isinstance(edge, Tensor)}
    modules = modules or {}
    counted, rows = {}, []

    def add(call, node, name, array):
        op = node.function.__name__
        owner = _owner(array)                           # alive while the graph is, so its id is not reused meanwhile
        first = counted.setdefault(id(owner), None)
        if first is None:
            counted[id(owner)] = f"{op}.{name}"
        rows.append({"op": op, "call": call, "module": modules.get(id(node), (None, OUTSIDE))[1], "name": name,
                     "shape": tuple(array.shape), "dtype": str(array.dtype),
                     "bytes": 0 if first else int(owner.nbytes), "leaf": id(owner) in leaves,
                     "counted_at": first, "why": why(node.function, name),
                     "buffer": None if owner is array else (id(owner), tuple(owner.shape), int(array.nbytes))})

    live = [(call, node) for call, node in enumerate(nodes) if node.ctx is not None]
    for call, node in live:
        for name, array in kept_arrays(node.function, node.ctx):
            add(call, node, name, array)
    return MemoryReport(rows, len(nodes) - len(live))
