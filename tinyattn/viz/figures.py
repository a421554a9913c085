"""The lessons' static figures: attention heatmaps and grids, one head's pattern, head scores, attention over image
patches, position similarity, attention distance, curves and bars. Every function takes host NumPy arrays (call
Tensor.numpy() first) and returns the figure."""
import matplotlib.pyplot as plt
import numpy


TICK_SIZE = 8          # points: the smallest text on any figure


def _colorbar(image, ax, label=None, max_ticks=None):
    """A slim colour bar beside ax (or beside a list of axes) that says what the colours mean."""
    bar = (ax[0] if isinstance(ax, list) else ax).figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    if max_ticks:
        bar.locator = plt.MaxNLocator(max_ticks)
        bar.update_ticks()
    bar.ax.tick_params(labelsize=TICK_SIZE)
    if label:
        bar.set_label(label, fontsize=TICK_SIZE + 1)
    return bar


def _token_labels(tokens):
    """Tokens as tick labels: a newline or tab shown as \\n or \\t (not a line break), a space as itself."""
    return [repr(t)[1:-1] or " " for t in tokens]


def attention_heatmap(weights, x_labels=None, y_labels=None, ax=None, title=None, cmap="viridis", colorbar=True):
    """One (queries x keys) attention matrix with token labels on both axes: rows are queries, columns keys. The
    colour bar gives the weights' scale (each row sums to 1)."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.3 * weights.shape[1] + 2.6, 0.3 * weights.shape[0] + 1.5))
    image = ax.imshow(weights, cmap=cmap, vmin=0, aspect="auto")
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), labels=_token_labels(x_labels), fontsize=TICK_SIZE, rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), labels=_token_labels(y_labels), fontsize=TICK_SIZE)
    ax.tick_params(labelsize=TICK_SIZE)
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        _colorbar(image, ax, "attention weight")
    return fig or ax.figure


def attention_heatmaps(maps, x_labels, y_labels, titles):
    """Attention matrices side by side, each as attention_heatmap draws it (its own tokens, title and colour bar):
    maps, x_labels, y_labels and titles are lists with one entry per panel. The layout keeps each panel's text
    (a colour bar's label, the next panel's tick labels) clear of the others'."""
    width = sum(0.25 * numpy.shape(m)[1] + 2.0 for m in maps)
    height = 0.3 * max(numpy.shape(m)[0] for m in maps) + 1.5
    fig, axes = plt.subplots(1, len(maps), figsize=(width, height), squeeze=False, layout="constrained")
    for ax, weights, xs, ys, title in zip(axes[0], maps, x_labels, y_labels, titles):
        attention_heatmap(numpy.asarray(weights), xs, ys, ax=ax, title=title)
    return fig


def position_encoding(table):
    """A position encoding table (positions, dims) and the dot products between its positions, side by side, each
    with a colour bar."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    drawn = axes[0].imshow(table.T, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
    axes[0].set(title="the encoding (dimensions x positions)", xlabel="position", ylabel="dimension")
    _colorbar(drawn, axes[0], "value")
    drawn = axes[1].imshow(table @ table.T, cmap="viridis")
    axes[1].set(title="dot product between positions", xlabel="position", ylabel="position")
    _colorbar(drawn, axes[1], "dot product")
    for ax in axes:
        ax.tick_params(labelsize=TICK_SIZE)
        ax.title.set_fontsize(9)
    return fig


def attention_grid(maps, x_labels=None, y_labels=None, row_names=None, title=None):
    """A grid of heatmaps: maps (rows, cols, Lq, Lk), e.g. layers x heads."""
    maps = numpy.asarray(maps)
    rows, cols = maps.shape[:2]
    labels = max(len(x_labels) if x_labels is not None else 0, len(y_labels) if y_labels is not None else 0)
    side = max(2.4, 0.15 * labels + 0.6)                 # room for 8-point labels, one per token
    fig, axes = plt.subplots(rows, cols, figsize=(side * cols + 1.5, side * rows + 0.8), squeeze=False,
                             layout="constrained")
    top = float(maps.max()) if maps.size else 1.0          # one colour scale for every panel
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            image = ax.imshow(maps[r, c], cmap="viridis", vmin=0, vmax=top, aspect="auto")
            ax.set_xticks([])
            ax.set_yticks([])
            if x_labels is not None and r == rows - 1:
                ax.set_xticks(range(len(x_labels)), labels=_token_labels(x_labels), fontsize=TICK_SIZE, rotation=90)
            if y_labels is not None and c == 0:
                ax.set_yticks(range(len(y_labels)), labels=_token_labels(y_labels), fontsize=TICK_SIZE)
            ax.set_title((f"{row_names[r]}, " if row_names else "") + f"head {c}", fontsize=9)
    _colorbar(image, list(axes.reshape(-1)), "attention weight")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def head_pattern(weights, tokens, ax=None, title=None):
    """One head's (T x T) attention over a sequence, its tokens (strings or ids) on both axes: rows are queries,
    columns keys."""
    weights = numpy.asarray(weights)
    if weights.ndim != 2 or len(tokens) != weights.shape[0] or weights.shape[0] != weights.shape[1]:
        raise ValueError(f"head_pattern takes one head's (T, T) weights and T tokens, got weights {weights.shape} "
                         f"and {len(tokens)} tokens")
    labels = [t if isinstance(t, str) else str(t) for t in tokens]
    return attention_heatmap(weights, labels, labels, ax=ax, title=title)


def head_score_map(scores, title=None, label="score", ax=None):
    """A score per head as a (layers x heads) heat map, each cell written on it; the colour bar runs from 0 to 1, the
    scores' range (tinyattn.interpret's head scores)."""
    scores = numpy.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"head_score_map takes a (layers, heads) array, got shape {scores.shape}")
    layers, heads = scores.shape
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.75 * heads + 2.2, 0.6 * layers + 1.3))
    image = ax.imshow(scores, cmap="viridis", vmin=0, vmax=max(1.0, float(scores.max())), aspect="auto")
    for (layer, head), value in numpy.ndenumerate(scores):
        ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=TICK_SIZE,
                color="black" if value > 0.6 else "white")
    ax.set_xticks(range(heads), labels=[str(h) for h in range(heads)], fontsize=TICK_SIZE)
    return _by_layer(image, ax, "head", title, label, fig)


def _by_layer(image, ax, columns, title, label, fig):
    """A (layers x columns) map's layer axis, axis names, title and colour bar; its figure."""
    layers = image.get_array().shape[0]
    ax.set_yticks(range(layers), labels=[str(layer) for layer in range(layers)], fontsize=TICK_SIZE)
    ax.set_xlabel(columns)
    ax.set_ylabel("layer")
    if title:
        ax.set_title(title, fontsize=9)
    _colorbar(image, ax, label)
    return fig or ax.figure


def patching_map(effect, columns="head", tokens=None, title=None, label="metric", ax=None):
    """An activation-patching sweep (interpret.patching_sweep) as a (layers x heads, or layers x positions) heat map,
    on a diverging scale centred on 0 (a patch can raise or lower the metric); tokens label the positions."""
    effect = numpy.asarray(effect)
    if effect.ndim != 2:
        raise ValueError(f"patching_map takes a (layers, heads or positions) array, got shape {effect.shape}")
    layers, width = effect.shape
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(min(0.5 * width + 2.4, 12), 0.6 * layers + 1.3))
    bound = max(float(numpy.abs(effect).max()), 1e-12)
    image = ax.imshow(effect, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    labels = _token_labels(tokens) if tokens is not None else [str(i) for i in range(width)]
    ax.set_xticks(range(width), labels=labels, fontsize=TICK_SIZE, rotation=90 if tokens is not None else 0)
    return _by_layer(image, ax, columns, title, label, fig)


def patch_attention(image, weights, grid, ax=None, title=None, colorbar=True):
    """Attention over image patches laid on the image: weights (grid_h * grid_w,) upsampled to the image size. The
    colour bar gives this panel's scale of weights (from 0)."""
    grid_h, grid_w = grid
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(3.6, 3 * image.shape[0] / image.shape[1] + 0.4))
    heat = numpy.kron(numpy.asarray(weights).reshape(grid_h, grid_w),
                      numpy.ones((image.shape[0] // grid_h, image.shape[1] // grid_w)))
    ax.imshow(image, cmap="gray")
    overlay = ax.imshow(heat, cmap="inferno", alpha=0.55, vmin=0)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        _colorbar(overlay, ax, max_ticks=3)
    return fig or ax.figure


def position_similarity(pos_embed, grid, title="cosine similarity of position embeddings"):
    """For each patch position, the cosine similarity of its embedding with every other patch's, as a grid of
    grids (the ViT paper's Figure 7, centre)."""
    grid_h, grid_w = grid
    e = numpy.asarray(pos_embed, dtype=numpy.float64)
    e = e / numpy.linalg.norm(e, axis=1, keepdims=True)
    sim = e @ e.T
    fig, axes = plt.subplots(grid_h, grid_w, figsize=(1.1 * grid_w + 1.2, 1.1 * grid_h + 0.4), squeeze=False,
                             layout="constrained")
    for i, ax in enumerate(axes.reshape(-1)):
        image = ax.imshow(sim[i].reshape(grid_h, grid_w), cmap="viridis", vmin=-1, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
    for r in range(grid_h):                              # the outer grid: which patch each small square belongs to
        axes[r, 0].set_ylabel(f"row {r}", fontsize=TICK_SIZE)
    for c in range(grid_w):
        axes[-1, c].set_xlabel(f"col {c}", fontsize=TICK_SIZE)
    _colorbar(image, list(axes.reshape(-1)), "cosine similarity")
    fig.suptitle(title, fontsize=10)
    return fig


def relative_bias(tables, window, titles):
    """Learned relative position biases (Swin's, or a ViT's relative scheme), one panel per head. tables: a list of
    ((2 window - 1)^2, heads) arrays indexed by the (query - key) offset, as nn.RelativePositionBias keeps them;
    titles: one name per table. Each panel shows the bias by where the key sits from the query (dy, dx), the query
    itself at the centre: red is an offset that head favours whatever the tokens hold, blue one it avoids."""
    side, offsets = 2 * window - 1, range(-window + 1, window)
    panels = [(table, title, head) for table, title in zip(tables, titles) for head in range(table.shape[-1])]
    limit = max(numpy.abs(table).max() for table in tables)
    fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels), 3), squeeze=False, layout="constrained")
    for ax, (table, title, head) in zip(axes[0], panels):
        by_key_offset = table[:, head].reshape(side, side)[::-1, ::-1]          # (query - key) -> (key - query)
        image = ax.imshow(by_key_offset, cmap="coolwarm", vmin=-limit, vmax=limit)
        ax.set_xticks(range(side), labels=offsets, fontsize=TICK_SIZE)
        ax.set_yticks(range(side), labels=offsets, fontsize=TICK_SIZE)
        ax.set_xlabel("dx (key column - query column)", fontsize=TICK_SIZE)
        ax.set_title(f"{title}, head {head}", fontsize=9)
    axes[0, 0].set_ylabel("dy (key row - query row)", fontsize=TICK_SIZE)
    _colorbar(image, list(axes[0]), "bias added to the score")
    return fig


def attention_distance(distances, uniform=None, limits=None):
    """Mean attention distance of each head against depth: distances (depth, heads). uniform: the distance of
    attention spread evenly over every patch, drawn as a dashed line; limits: (nearest, farthest) distance the
    patch grid allows, which fixes the y axis so that noise around one value does not look like a trend."""
    distances = numpy.asarray(distances)
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    for layer, row in enumerate(distances):
        ax.scatter(numpy.full(len(row), layer), row, s=18, color="C0", label="a head" if layer == 0 else None)
    if uniform is not None:
        ax.axhline(uniform, color="gray", linestyle="--", label=f"uniform attention ({uniform:.1f})")
    if limits is not None:
        ax.set_ylim(*limits)
    ax.set_xticks(range(len(distances)))
    ax.tick_params(labelsize=TICK_SIZE)
    ax.set_xlabel("network depth (block)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_title("mean attention distance of each head", fontsize=10)
    ax.legend(fontsize=TICK_SIZE)
    return fig


def curves(series, xlabel="step", ylabel="loss", title=None, logy=False, hlines=None, colors=None, secondary=None,
           ylabel2=None):
    """Line plots of named series: {name: values} or {name: (xs, ys)}. hlines: {label: y} drawn as dashed
    horizontal reference lines (a baseline to beat). colors: {name: colour} (so that one quantity keeps its colour
    across figures). secondary: more series, on a second y axis on the right labelled ylabel2 (another unit)."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    colors = colors or {}

    def draw(axis, named, style):
        for name, values in named.items():
            xs, ys = values if isinstance(values, tuple) else (numpy.arange(len(values)), values)
            axis.plot(xs, ys, label=name, marker="o" if len(ys) < 20 else None, color=colors.get(name),
                      linestyle=style)
    draw(ax, series, "-")
    for i, (label, y) in enumerate((hlines or {}).items()):
        ax.axhline(y, color="gray", linestyle=("--", ":", "-.")[i % 3], label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.tick_params(labelsize=TICK_SIZE)
    if title:
        ax.set_title(title, fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    if secondary:
        right = ax.twinx()
        draw(right, secondary, "--")
        right.set_ylabel(ylabel2 or "")
        right.tick_params(labelsize=TICK_SIZE)
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, fontsize=TICK_SIZE)
    ax.grid(alpha=0.3)
    return fig


def bars(values, errors=None, ylabel="", title=None, hlines=None, group_labels=None, fmt="{:.3f}", ymin=None):
    """A bar per name, its value written on it: values {name: number}, or {name: [numbers]} for a group of bars per
    name (group_labels names the bars of a group). errors, shaped as values: half-widths drawn as error bars (a
    spread over seeds). hlines: {label: y} dashed reference lines. ymin: where the y axis starts, when the differences
    that matter are small next to the values (the axis label then says so)."""
    names = list(values)
    grouped = numpy.ndim(values[names[0]]) > 0
    table = numpy.array([numpy.atleast_1d(values[n]) for n in names], dtype=float)            # (names, group)
    spread = None if errors is None else numpy.array([numpy.atleast_1d(errors[n]) for n in names], dtype=float)
    groups = table.shape[1]
    width = 0.8 / groups
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(names) * max(1, groups * 0.7) + 1.5), 3.4))
    for g in range(groups):
        xs = numpy.arange(len(names)) + (g - (groups - 1) / 2) * width
        label = group_labels[g] if grouped and group_labels else None
        drawn = ax.bar(xs, table[:, g], width * 0.95, label=label,
                       yerr=None if spread is None else spread[:, g], capsize=3)
        ax.bar_label(drawn, labels=[fmt.format(v) for v in table[:, g]], fontsize=TICK_SIZE, padding=2)
    for i, (label, y) in enumerate((hlines or {}).items()):
        ax.axhline(y, color="gray", linestyle=("--", ":", "-.")[i % 3], label=label)
    ax.set_xticks(range(len(names)), labels=names, fontsize=TICK_SIZE, rotation=20 if len(names) > 4 else 0,
                  ha="right" if len(names) > 4 else "center")
    ax.tick_params(axis="y", labelsize=TICK_SIZE)
    ax.margins(y=0.15)
    if ymin is not None:
        top = float((table + (0 if spread is None else spread)).max())
        ax.set_ylim(ymin, top + 0.15 * (top - ymin))
        ylabel = f"{ylabel} (axis from {ymin:g})"
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if (grouped and group_labels) or hlines:
        ax.legend(fontsize=TICK_SIZE)
    ax.grid(axis="y", alpha=0.3)
    return fig


def stack_maps(maps):
    """A list of per-layer (batch, heads, queries, keys) maps (the first batch item is shown) or a
    (layers, heads, queries, keys) array -> one float array (layers, heads, queries, keys)."""
    if isinstance(maps, (list, tuple)):
        layers = [numpy.asarray(m)[0] if numpy.ndim(m) == 4 else numpy.asarray(m) for m in maps]
        shapes = {layer.shape for layer in layers}
        if len(shapes) != 1 or len(next(iter(shapes))) != 3:
            raise ValueError("every layer's map must be (heads, queries, keys), or (batch, heads, queries, keys), "
                             f"all of one shape; got {[layer.shape for layer in layers]}")
        maps = numpy.stack(layers)
    maps = numpy.asarray(maps, dtype=float)
    if maps.ndim != 4:
        raise ValueError(f"maps must be (layers, heads, queries, keys), got shape {maps.shape}")
    return maps
