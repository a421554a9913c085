"""Flash attention, step by step, from a trace (what tinyattn.functional.trace_flash_attention returns, or its
records): a matplotlib frame per visited tile, the frames as a GIF (Pillow), and a self-contained HTML player (next,
previous, play; nothing fetched, as attention_html's views) for notebooks and pages. The views read the records'
plain arrays, numbers and labels only; where they keep batch or head dims, the first entry is shown.

A forward frame: the whole score matrix in grey (the tiles visited so far), the current tile lit; each row's
running max m and normaliser l as bars; the output so far (rows of finished blocks, the current block's partial
acc / l) beside the true output; and a meter of the bytes the loop holds for the tile against the whole matrix.
A backward frame lights the recomputed P instead, with dQ accumulated so far against the true dQ."""
import base64
import io

import matplotlib.pyplot as plt
import numpy

from .attention_html import _SHARED_STYLE, _document, _views
from .figures import TICK_SIZE

GREY, LIT = "Greys", "viridis"


def _host(array):
    """A record's array as a 2-D float NumPy array of its first batch and head entry (a CuPy array comes over)."""
    array = array.get() if hasattr(array, "get") and not isinstance(array, dict) else numpy.asarray(array)
    return numpy.asarray(array, dtype=float).reshape((-1,) + array.shape[-2:])[0]


def _unpacked(trace, output, grads, step=None):
    """records, output, grads of trace: a FlashTrace (its output and grads unless given), or its records alone."""
    records = getattr(trace, "records", trace)
    if records is not trace:
        output = trace.output if output is None else output
        grads = trace.grads if grads is None else grads
    if not records or not all(isinstance(r, dict) and "pass" in r and "label" in r for r in records):
        raise ValueError("expected what trace_flash_attention(...) returns, or its records: a non-empty list of "
                         "dicts")
    if step is not None and not 0 <= step < len(records):
        raise IndexError(f"step {step} is outside the trace's {len(records)} records")
    return records, output, grads


def _shape(records):
    rows = max(r["rows"][1] for r in records)
    cols = max(r["cols"][1] for r in records)
    return rows, cols, _host(records[0]["acc" if "acc" in records[0] else "dv"]).shape[-1]


def step_state(trace, step, output=None, grads=None):
    """What frame `step` of trace (a FlashTrace, or its records) shows, as plain NumPy arrays and numbers: "matrix"
    (scores seen so far, NaN where not yet visited), "tile" ((r0, r1, c0, c1)), "lit" (the tile's scores, or P in
    backward), "m" and "l" (per row, NaN where not reached; forward only), "partial" and "true" (the output so far
    and the true output, or dQ so far and the true dQ in backward), "tile_bytes", "matrix_bytes", "title" (the
    record's label and what the tile does)."""
    records, output, grads = _unpacked(trace, output, grads, step)
    n, m_keys, width = _shape(records)
    record = records[step]
    which = record["pass"]
    done = [r for r in records[:step + 1] if r["pass"] == which]
    matrix = numpy.full((n, m_keys), numpy.nan)
    for r in done:
        matrix[slice(*r["rows"]), slice(*r["cols"])] = _host(r["scores"])
    state = {"matrix": matrix, "tile": record["rows"] + record["cols"], "tile_bytes": record["tile_bytes"],
             "matrix_bytes": record["matrix_bytes"], "pass": which}
    if which == "forward":
        m, l = numpy.full(n, numpy.nan), numpy.full(n, numpy.nan)
        partial = numpy.full((n, width), numpy.nan)
        for r in done:
            m[slice(*r["rows"])] = _host(r["m"])[:, 0]
            l[slice(*r["rows"])] = _host(r["l"])[:, 0]
            partial[slice(*r["rows"])] = _host(r["partial"])
        alpha = _host(record["alpha"])[:, 0]
        state.update(lit=_host(record["scores"]), m=m, l=l, partial=partial,
                     true=None if output is None else _host(output),
                     title=f"{record['label']}; rescale exp(m - m') from {alpha.min():.3g} to {alpha.max():.3g}")
    else:
        grad_q = numpy.zeros((n, _host(record["dq"]).shape[-1]))
        for r in done:
            grad_q[slice(*r["rows"])] += _host(r["dq"])
        state.update(lit=_host(record["p"]), m=None, l=None, partial=grad_q,
                     true=None if grads is None else _host(grads[0]),
                     title=f"{record['label']}; P = exp(S - L) recomputed")
    return state


def _limits(values):
    finite = values[numpy.isfinite(values)]
    return (finite.min(), finite.max()) if finite.size else (0.0, 1.0)


def flash_frame(trace, step, output=None, grads=None, figsize=(11, 3.6)):
    """One step of trace (a FlashTrace, or its records) as a matplotlib figure (see the module's docstring). output:
    the true output (and grads: the true dQ, dK, dV) to set beside the partial ones; a FlashTrace's own by
    default."""
    s = step_state(trace, step, output, grads)
    fig, axes = plt.subplots(1, 4, figsize=figsize, layout="constrained",
                             gridspec_kw={"width_ratios": [3, 1.4, 2.2, 0.6]})
    ax = axes[0]
    scores = s["matrix"]
    low, high = _limits(numpy.where(numpy.isinf(scores), numpy.nan, scores))
    ax.imshow(numpy.ma.masked_invalid(scores), cmap=GREY, vmin=low, vmax=high, alpha=0.45, aspect="auto")
    r0, r1, c0, c1 = s["tile"]
    lit = numpy.ma.masked_invalid(numpy.where(numpy.isinf(s["lit"]), numpy.nan, s["lit"]))
    ax.imshow(lit, cmap=LIT, extent=(c0 - 0.5, c1 - 0.5, r1 - 0.5, r0 - 0.5), aspect="auto",
              vmin=(low if s["pass"] == "forward" else 0), vmax=(high if s["pass"] == "forward" else 1))
    ax.add_patch(plt.Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0, r1 - r0, fill=False, color="tab:red", lw=1.5))
    ax.set(xlim=(-0.5, scores.shape[1] - 0.5), ylim=(scores.shape[0] - 0.5, -0.5), xlabel="key", ylabel="query")
    ax.set_title("scores S (grey), this tile lit" if s["pass"] == "forward" else "P = exp(S - L), this tile lit",
                 fontsize=9)
    ax = axes[1]
    rows = numpy.arange(scores.shape[0])
    if s["m"] is not None:
        ax.barh(rows, numpy.nan_to_num(s["m"]), height=1.0, color="tab:blue", alpha=0.7, label="m")
        ax.barh(rows, numpy.nan_to_num(numpy.log(s["l"])), left=numpy.nan_to_num(s["m"]), height=1.0,
                color="tab:orange", alpha=0.7, label="log l (m + log l: L)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=2)
        ax.set_title("running max m and log l per row", fontsize=9)
    else:
        ax.barh(rows, numpy.linalg.norm(s["partial"], axis=1), height=1.0, color="tab:green")
        ax.set_title("|dQ row| so far", fontsize=9)
    ax.axhspan(r0 - 0.5, r1 - 0.5, color="tab:red", alpha=0.1)
    ax.set_ylim(scores.shape[0] - 0.5, -0.5)
    ax = axes[2]
    partial = s["partial"] if s["true"] is None else numpy.concatenate(
        [s["partial"], numpy.full((len(rows), 1), numpy.nan), s["true"]], axis=1)
    low, high = _limits(partial)
    ax.imshow(numpy.ma.masked_invalid(partial), cmap="coolwarm", vmin=min(low, -high), vmax=max(high, -low),
              aspect="auto")
    ax.set_title(("output so far" if s["pass"] == "forward" else "dQ so far")
                 + (" | true" if s["true"] is not None else ""), fontsize=9)
    ax.set_xticks([])
    ax = axes[3]
    ax.bar([0], [s["matrix_bytes"]], color="0.8", label="whole matrix")
    ax.bar([0], [s["tile_bytes"]], color="tab:red", label="the loop holds")
    ax.set_ylim(0, s["matrix_bytes"] * 1.05)
    ax.set_xticks([])
    ax.set_title(f"bytes\n{s['tile_bytes']:,} of\n{s['matrix_bytes']:,}", fontsize=8)
    for ax in axes:
        ax.tick_params(labelsize=TICK_SIZE)
    fig.suptitle(s["title"], fontsize=10)
    return fig


def _png(fig, dpi=80):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


def _frames(trace, output, grads, steps, dpi):
    records, output, grads = _unpacked(trace, output, grads)
    steps = range(len(records)) if steps is None else list(steps)
    if not steps:
        raise ValueError(f"steps={steps}: no step to draw; name some of the trace's {len(records)} records "
                         f"(0 to {len(records) - 1}), or None for all of them")
    return [(step, _png(flash_frame(records, step, output, grads), dpi)) for step in steps]


def flash_animation(trace, path, output=None, grads=None, steps=None, seconds_per_frame=0.8, dpi=70):
    """Write the frames of trace (a FlashTrace, or its records: every step, or those of steps) as an animated GIF
    at path with Pillow; returns path."""
    from PIL import Image
    images = [Image.open(io.BytesIO(png)).convert("RGB") for _, png in _frames(trace, output, grads, steps, dpi)]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(seconds_per_frame * 1000), loop=0)
    return path


def flash_player_html(trace, output=None, grads=None, steps=None, dpi=70, title="flash attention, tile by tile"):
    """The frames of trace (a FlashTrace, or its records: every step, or those of steps) as one self-contained HTML
    document, an HTMLView (a str): the frames inline as PNG, previous, play/pause, next and a slider, the step's
    numbers as text. Jupyter shows it as the cell's output; viz.save or .save(path) writes it."""
    records, output, grads = _unpacked(trace, output, grads)
    frames = _frames(records, output, grads, steps, dpi)
    view = f"tinyattn-flash-player-{next(_views)}"
    data = {"id": view, "frames": [f"data:image/png;base64,{base64.b64encode(png).decode()}" for _, png in frames],
            "captions": [step_state(records, step, output, grads)["title"] for step, _ in frames]}
    body = f"""<div class="tinyattn-view" id="{view}"><div class="controls">
<button class="previous">&#9664; previous</button><button class="play">play</button>
<button class="next">next &#9654;</button><input class="step" type="range" min="0" value="0">
<span class="where"></span></div><div class="caption"></div><img class="frame" alt="flash attention, one tile"></div>"""
    return _document(title, body, _SHARED_STYLE + _PLAYER_STYLE, _PLAYER_SCRIPT, data)


_PLAYER_STYLE = """
.tinyattn-view img.frame { max-width: 100%; display: block; }
.tinyattn-view input.step { width: 40%; vertical-align: middle; }
"""

# The step shown is also the root's data-step, so a test can read where the buttons took it.
_PLAYER_SCRIPT = r"""
function tinyattnView(d) {
  const root = document.getElementById(d.id), img = root.querySelector("img.frame"),
        slider = root.querySelector("input.step"), play = root.querySelector("button.play");
  let at = 0, timer = null;
  slider.max = d.frames.length - 1;
  function show(i) {
    at = (i + d.frames.length) % d.frames.length;
    img.src = d.frames[at]; slider.value = at; root.dataset.step = at;
    root.querySelector(".where").textContent = "step " + (at + 1) + " of " + d.frames.length;
    root.querySelector(".caption").textContent = d.captions[at];
  }
  root.querySelector("button.previous").onclick = () => show(at - 1);
  root.querySelector("button.next").onclick = () => show(at + 1);
  play.onclick = () => {
    if (timer) { clearInterval(timer); timer = null; play.textContent = "play"; }
    else { timer = setInterval(() => show(at + 1), 800); play.textContent = "pause"; }
  };
  slider.oninput = () => show(Number(slider.value));
  show(0);
}
"""
