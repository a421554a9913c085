"""What every backward keeps: `ta.memory_report(loss)` walks the graph behind a tensor, before backward() frees it,
and lists each array a Function's ctx holds for its backward.

    with memory.track_modules(model) as modules:        # optional: which module made each Function call
        loss = model(ids, targets)[1]
    print(ta.memory_report(loss, modules))

An array is reachable from a ctx when save_for_backward was given it or when it is an attribute of ctx (looked for
inside tuples, lists and dicts). It is named by that attribute, or by the name backward unpacks it into
(`q, k, v, out, L, mask = ctx.saved_tensors` names the sixth "mask"; "saved[5]" where backward does not unpack
them). Memory is counted once, by the array that owns it (a view keeps its whole base alive): a second holder gets a
row of 0 bytes that says who counted it. That is all the graph keeps alive: a node keeps of its inputs only their
shapes, dtypes and devices, so an intermediate that no ctx saved is freed once forward is done with it. Memory that
belongs to a leaf tensor the graph leads to (a parameter, an input that requires grad) lives on whatever the graph
does; it is reported apart and left out of the total. Nothing is recorded while a model runs unless track_modules
is on, so the report costs nothing until asked for."""
import ast
import contextlib
import functools
import inspect
import textwrap

from . import backend
from .tensor import Tensor

OUTSIDE = "(no module)"


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
    """rows: one dict per array a ctx keeps (op, call, module, name, shape, dtype, bytes, leaf, counted_at).
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

    def table(self, arrays=True):
        """The report as text: per op, per module (where tracked), then (arrays=True) every array a ctx keeps."""
        def lines_of(title, per):
            return [f"{title:36s} {'calls':>5s} {'saved':>10s} {'leaves':>10s}"] + [
                f"{name:36s} {e['calls']:5d} {readable(e['saved_bytes']):>10s} {readable(e['leaf_bytes']):>10s}"
                for name, e in per.items()]
        lines = lines_of("op", self.per_op())
        modules = self.per_module()
        if list(modules) != [OUTSIDE]:
            lines += [""] + lines_of("module", modules)
        if arrays:
            lines += ["", f"{'op':36s} {'saved array':16s} {'shape':22s} {'dtype':8s} {'bytes':>10s}"]
            for row in self.arrays():
                note = (" (a leaf's)" if row["leaf"] else "") + (f" (counted at {row['counted_at']})"
                                                                 if row["counted_at"] else "")
                lines.append(f"{row['op']:36s} {row['name']:16s} {str(row['shape']):22s} {row['dtype']:8s} "
                             f"{readable(row['bytes']):>10s}{note}")
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
                     "counted_at": first})

    live = [(call, node) for call, node in enumerate(nodes) if node.ctx is not None]
    for call, node in live:
        for name, array in kept_arrays(node.function, node.ctx):
            add(call, node, name, array)
    return MemoryReport(rows, len(nodes) - len(live))
