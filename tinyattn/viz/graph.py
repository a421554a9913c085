"""The autograd graph that produced a tensor, drawn with matplotlib alone (no graphviz), as micrograd's draw_dot and
DeZero's plot_dot_graph draw theirs: each recorded operation by name with the shape and dtype it made, each leaf
tensor with its shape and dtype (and its parameter name when a module is given), arrows in the direction the values
flowed, inputs at the top and the result at the bottom. The walk follows grad_fn.next_functions, as code written for
PyTorch would."""
import matplotlib.pyplot as plt


def _key(node):
    """One identity per graph node: an AccumulateGrad is made afresh on every visit, so a leaf is known by its tensor."""
    return id(node.variable) if node.name() == "AccumulateGrad" else id(node)


def _walk(tensor):
    """Every node reachable from tensor.grad_fn (operations and AccumulateGrad leaves), and the edges
    (input node, consumer node)."""
    root = tensor.grad_fn
    if root is None:
        raise ValueError("this tensor has no graph: it is a leaf, or it was computed under no_grad "
                         "or from tensors that do not require grad")
    nodes, edges, stack, seen = {}, [], [root], set()
    while stack:
        node = stack.pop()
        if _key(node) in seen:
            continue
        seen.add(_key(node))
        nodes[_key(node)] = node
        for parent, _ in node.next_functions:
            if parent is not None:
                edges.append((_key(parent), _key(node)))
                stack.append(parent)
    return nodes, sorted(set(edges))


def _levels(nodes, edges):
    """Each node's row from the top: an operation one row below the lowest of its inputs; a leaf one row above the
    first operation that uses it (so a parameter sits beside the step that reads it, not at the very top)."""
    inputs = {key: [] for key in nodes}
    for parent, child in edges:
        inputs[child].append(parent)
    level = {}
    for key in nodes:                        # iterative depth-first, so a long chain (an RNN) cannot recurse too deep
        stack = [key]
        while stack:
            pending = [p for p in inputs[stack[-1]] if p not in level]
            if pending:
                stack.extend(pending)
                continue
            done = stack.pop()
            level[done] = 1 + max((level[p] for p in inputs[done]), default=-1)
    first_use = {}
    for parent, child in edges:
        first_use[parent] = min(first_use.get(parent, level[child]), level[child])
    for key in nodes:
        if not inputs[key] and key in first_use:
            level[key] = first_use[key] - 1
    return level


def _untangle(rows, edges, sweeps=4):
    """Fewer crossing arrows: reorder each row by the mean place of its nodes' neighbours in the rows above (a
    downward sweep), then below (upward), a few times over (the barycentre heuristic of layered graph drawing)."""
    inputs, consumers = {}, {}
    for parent, child in edges:
        inputs.setdefault(child, []).append(parent)
        consumers.setdefault(parent, []).append(child)
    depths = sorted(rows)
    for sweep in range(2 * sweeps):
        place = {key: (i + 0.5) / len(row) for row in rows.values() for i, key in enumerate(row)}
        neighbours = inputs if sweep % 2 == 0 else consumers
        for depth in depths if sweep % 2 == 0 else reversed(depths):
            def centre(key):
                near = neighbours.get(key, [])
                return sum(place[n] for n in near) / len(near) if near else place[key]
            rows[depth].sort(key=centre)
            place.update({key: (i + 0.5) / len(rows[depth]) for i, key in enumerate(rows[depth])})


def _label(node, names):
    """The box's text and colour: a leaf's name (or "input"), shape and dtype; an operation's name and what it made."""
    if node.name() == "AccumulateGrad":
        t = node.variable
        return f"{names.get(id(t), 'input')}\n{tuple(t.shape)} {t.dtype}", "#dbeafe"
    return f"{node.function.__name__}\n{tuple(node.output_shape)} {node.output_dtype}", "#fde68a"


def draw_graph(tensor, module=None, ax=None, title=None):
    """A matplotlib figure of the graph behind tensor, top to bottom. module: its parameters are labelled by their
    names in it (as named_parameters() gives them); other leaves are labelled "input"."""
    nodes, edges = _walk(tensor)
    level = _levels(nodes, edges)
    names = {id(p): name for name, p in module.named_parameters()} if module is not None else {}
    labels = {key: _label(node, names) for key, node in nodes.items()}
    rows = {}
    for key in sorted(nodes, key=lambda key: (level[key], labels[key][0])):
        rows.setdefault(level[key], []).append(key)
    paths = {}                               # an arrow over several rows passes through a waypoint in each row between,
    for parent, child in edges:              # which takes a place in that row, so it runs beside boxes, not through them
        waypoints = [("waypoint", parent, child, depth) for depth in range(level[parent] + 1, level[child])]
        for waypoint in waypoints:
            rows[waypoint[-1]].append(waypoint)
        paths[parent, child] = [parent] + waypoints + [child]
    _untangle(rows, [pair for path in paths.values() for pair in zip(path, path[1:])])
    top = min(rows)
    height, width = max(rows) - top + 1, max(len(row) for row in rows.values())
    position = {key: ((i + 0.5) * width / len(row), height - 1 - (depth - top))
                for depth, row in rows.items() for i, key in enumerate(row)}
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 2.2 * width), max(3.0, 1.1 * height + 0.6)))
    half_box = 0.2                           # rows are 1 apart; a box reaches about this far above and below its centre
    for path in paths.values():              # from the bottom of one box to the top of the next, through waypoints
        (x0, y0), *between, (x1, y1) = [position[key] for key in path]
        points = [(x0, y0 - half_box)] + between + [(x1, y1 + half_box)]
        if between:                          # up to the last waypoint as a line, the last stretch as the arrow
            ax.plot(*zip(*points[:-1]), color="0.45", lw=1.0)
        ax.annotate("", xy=points[-1], xytext=points[-2],
                    arrowprops=dict(arrowstyle="-|>", color="0.45", lw=1.0, shrinkA=0, shrinkB=0))
    for key, (text, colour) in labels.items():
        ax.text(*position[key], text, ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round,pad=0.35", facecolor=colour, edgecolor="0.3"))
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.7, height - 0.3)
    ax.axis("off")
    ax.set_title(title or "autograd graph: tensors (blue) flow into operations (yellow)", fontsize=9)
    return fig or ax.figure
