"""Figures for the lessons, with matplotlib on the headless Agg backend. Every function takes host NumPy arrays
(call Tensor.numpy() first) and returns the figure; save() writes it under plots/."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy  # noqa: E402


def save(fig, path):
    """Write fig to path (folders created), close it, and return the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def attention_heatmap(weights, x_labels=None, y_labels=None, ax=None, title=None, cmap="viridis"):
    """One (queries x keys) attention matrix with token labels on both axes: rows are queries, columns keys."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.3 * weights.shape[1] + 2, 0.3 * weights.shape[0] + 1.5))
    ax.imshow(weights, cmap=cmap, vmin=0, aspect="auto")
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), labels=[repr(t)[1:-1] or " " for t in x_labels], fontsize=7,
                      rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), labels=[repr(t)[1:-1] or " " for t in y_labels], fontsize=7)
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    if title:
        ax.set_title(title, fontsize=9)
    return fig or ax.figure


def attention_grid(maps, x_labels=None, y_labels=None, row_names=None, title=None):
    """A grid of heatmaps: maps (rows, cols, Lq, Lk), e.g. layers x heads."""
    maps = numpy.asarray(maps)
    rows, cols = maps.shape[:2]
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols + 1, 2.4 * rows + 0.5), squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            ax.imshow(maps[r, c], cmap="viridis", vmin=0, aspect="auto")
            ax.set_xticks([])
            ax.set_yticks([])
            if x_labels is not None and r == rows - 1:
                ax.set_xticks(range(len(x_labels)), labels=list(x_labels), fontsize=6, rotation=90)
            if y_labels is not None and c == 0:
                ax.set_yticks(range(len(y_labels)), labels=list(y_labels), fontsize=6)
            ax.set_title((f"{row_names[r]}, " if row_names else "") + f"head {c}", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def patch_attention(image, weights, grid, ax=None, title=None):
    """Attention over image patches laid on the image: weights (grid_h * grid_w,) upsampled to the image size."""
    grid_h, grid_w = grid
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(3, 3 * image.shape[0] / image.shape[1] + 0.4))
    heat = numpy.kron(numpy.asarray(weights).reshape(grid_h, grid_w),
                      numpy.ones((image.shape[0] // grid_h, image.shape[1] // grid_w)))
    ax.imshow(image, cmap="gray")
    ax.imshow(heat, cmap="inferno", alpha=0.55)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return fig or ax.figure


def position_similarity(pos_embed, grid, title="cosine similarity of position embeddings"):
    """For each patch position, the cosine similarity of its embedding with every other patch's, as a grid of
    grids (the ViT paper's Figure 7, centre)."""
    grid_h, grid_w = grid
    e = numpy.asarray(pos_embed, dtype=numpy.float64)
    e = e / numpy.linalg.norm(e, axis=1, keepdims=True)
    sim = e @ e.T
    fig, axes = plt.subplots(grid_h, grid_w, figsize=(1.1 * grid_w, 1.1 * grid_h))
    for i, ax in enumerate(numpy.asarray(axes).reshape(-1)):
        ax.imshow(sim[i].reshape(grid_h, grid_w), cmap="viridis", vmin=-1, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    return fig


def attention_distance(distances, patch_size=None):
    """Mean attention distance of each head against depth: distances (depth, heads)."""
    distances = numpy.asarray(distances)
    fig, ax = plt.subplots(figsize=(4, 3))
    for layer, row in enumerate(distances):
        ax.scatter(numpy.full(len(row), layer), row, s=18)
    ax.set_xlabel("network depth (block)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_title("how far each head looks", fontsize=10)
    return fig


def curves(series, xlabel="step", ylabel="loss", title=None, logy=False):
    """Line plots of named series: {name: values} or {name: (xs, ys)}."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, values in series.items():
        xs, ys = values if isinstance(values, tuple) else (numpy.arange(len(values)), values)
        ax.plot(xs, ys, label=name, marker="o" if len(ys) < 20 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
