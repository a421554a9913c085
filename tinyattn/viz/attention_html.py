"""Attention views as self-contained HTML: one document with its CSS and JavaScript inline and nothing fetched, so it
works opened from disk, offline, on a locked-down lab machine, in Jupyter and on the course's pages.

- attention_html: a head view in the spirit of bertviz's. Tokens on both sides, a line from each query (left) to
  each key (right) as strong as the weight; a choice of layer and head, or all heads at once, each in its colour;
  hovering a token on the left keeps only its row.
- patch_attention_html: a ViT's attention over an image's patches, per layer and head (or the heads' mean, or
  rollout when given), for the class token or a chosen patch (hover or click a patch).

Both take the host arrays the PNG figures take, and colour weights on the same scales (viridis for a head's
weights, inferno over images, from 0 to the largest weight shown), read from matplotlib's colour maps. A weight that
is NaN or infinite is drawn as a gap, and a line above the view names the heads that hold such weights.

The data goes into the page as JSON inside a <script>, with <, >, & and U+2028/2029 written as JSON escapes: a token
such as "</script>" would otherwise end the script there and let what follows it run.
"""
import base64
import html
import io
import itertools
import json

import matplotlib
import matplotlib.image
import numpy

from .figures import stack_maps

_views = itertools.count()                 # each view's elements get ids of their own: a page may hold several
HEAD_COLOURS = "tab10"                      # "all heads": one colour per head


class HTMLView(str):
    """A self-contained HTML document (it is the str): shown as itself in Jupyter, written to a file by save()."""

    def _repr_html_(self):
        return str(self)

    def save(self, path):
        """Write the document to path (UTF-8); returns path."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(self)
        return path


def _colour_table(name, stops=64):
    """matplotlib's colour map `name` as `stops` CSS colours, from its low end to its high end."""
    cmap = matplotlib.colormaps[name]
    return [matplotlib.colors.to_hex(cmap(i / (stops - 1))) for i in range(stops)]


# The same characters as JSON escapes: no "</script>" or "<!--" can close the data's script early, and no U+2028 or
# U+2029 can end a line inside a string for an older JavaScript engine.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def _document(title, body, style, script, data, note=""):
    """One HTML page: the view's data as JSON, its code, nothing loaded from elsewhere; note, when given, a line of
    text above the view."""
    note = f'<p class="tinyattn-note">{html.escape(note)}</p>' if note else ""
    return HTMLView(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{style}</style></head>
<body>{note}{body}
<script>{script}</script>
<script>tinyattnView({json.dumps(data, allow_nan=False).translate(_SCRIPT_SAFE)});</script>
</body></html>
""")


def _weights(array):
    """Weights as nested lists for the page's JSON, rounded to 5 places, None (a gap) where NaN or infinite."""
    array = numpy.asarray(array, dtype=float)
    return numpy.where(numpy.isfinite(array), numpy.round(array, 5), None).tolist()


def _gaps_note(layers, names, most=6):
    """One line naming the heads whose weights are NaN or infinite somewhere (drawn as gaps), with how many, or ""
    when every weight is finite. layers: per name, that layer's (heads, queries, keys) weights."""
    found = [f"{name} head {h} ({count})" for name, layer in zip(names, layers)
             for h, count in enumerate(numpy.sum(~numpy.isfinite(layer), axis=(-2, -1))) if count]
    if not found:
        return ""
    more = f" and {len(found) - most} more heads" if len(found) > most else ""
    return "weights that are NaN or infinite, drawn as gaps: " + ", ".join(found[:most]) + more


_SHARED_STYLE = """
.tinyattn-view { font: 13px/1.35 system-ui, sans-serif; color: #222; }
.tinyattn-view .controls { margin: 4px 0 8px; }
.tinyattn-view select, .tinyattn-view button { font: inherit; margin-right: 8px; padding: 2px 10px; color: #222;
  background: #f4f4f4; border: 1px solid #999; border-radius: 4px; cursor: pointer; }
.tinyattn-view button:hover, .tinyattn-view select:hover { background: #e4e4e4; }
.tinyattn-note { font: 13px/1.35 system-ui, sans-serif; color: #a40; margin: 4px 0; }
"""


def attention_html(maps, tokens, key_tokens=None, title="attention", layer=0, head=0):
    """A head view of attention weights as one self-contained HTML document (an HTMLView, a str).

    maps: a list over layers of (B, H, T, S) or (H, T, S) weights (the first batch item is shown), or an array
    (layers, heads, T, S). tokens: the T query tokens (strings or ids); key_tokens the S key tokens, the same as
    tokens when None. layer, head: what is shown first (head=None: all heads, coloured by head).
    """
    maps = stack_maps(maps)
    layers, heads, queries, keys = maps.shape
    key_tokens = tokens if key_tokens is None else key_tokens
    if len(tokens) != queries or len(key_tokens) != keys:
        raise ValueError(f"attention_html: maps of {queries} queries and {keys} keys, got {len(tokens)} tokens and "
                         f"{len(key_tokens)} key tokens")
    if not (0 <= layer < layers) or not (head is None or 0 <= head < heads):
        raise ValueError(f"attention_html: layer {layer} and head {head} for maps of {layers} layers and {heads} "
                         "heads")
    view = f"tinyattn-head-view-{next(_views)}"
    data = {"id": view, "weights": _weights(maps), "tokens": [str(t) for t in tokens],
            "keyTokens": [str(t) for t in key_tokens], "viridis": _colour_table("viridis"),
            "headColours": [_colour_table(HEAD_COLOURS, 10)[h % 10] for h in range(heads)],
            "layer": int(layer), "head": "all" if head is None else int(head)}
    body = f"""<div class="tinyattn-view" id="{view}"><div class="controls">
<label>layer <select class="layer"></select></label><label>head <select class="head"></select></label>
<span class="hint">hover a token on the left to see its row</span></div>
<svg class="lines"></svg></div>"""
    return _document(title, body, _SHARED_STYLE + _HEAD_VIEW_STYLE, _HEAD_VIEW_SCRIPT, data,
                     _gaps_note(maps, [f"layer {i}" for i in range(layers)]))


_HEAD_VIEW_STYLE = """
.tinyattn-view svg text { font-size: 13px; cursor: default; }
.tinyattn-view svg text.on { font-weight: bold; }
.tinyattn-view line[data-active="false"] { display: none; }
"""

# Lines are drawn once per layer and head choice; hovering only flips data-active on them, so a test (or a curious
# learner with the browser's inspector) can read from the DOM which lines a token keeps.
_HEAD_VIEW_SCRIPT = r"""
function tinyattnView(d) {
  const root = document.getElementById(d.id), svgNS = "http://www.w3.org/2000/svg";
  const svg = root.querySelector("svg.lines"), layerBox = root.querySelector("select.layer"),
        headBox = root.querySelector("select.head");
  const rowH = 20, left = 130, right = 330, y0 = 14, nRows = Math.max(d.tokens.length, d.keyTokens.length);
  svg.setAttribute("width", right + 140); svg.setAttribute("height", y0 + nRows * rowH);
  d.weights.forEach((_, i) => layerBox.add(new Option(String(i), String(i))));
  headBox.add(new Option("all", "all"));
  d.weights[0].forEach((_, h) => headBox.add(new Option(String(h), String(h))));
  layerBox.value = String(d.layer); headBox.value = String(d.head);
  function colourOf(w, top) {
    const i = Math.min(d.viridis.length - 1, Math.round((top > 0 ? w / top : 0) * (d.viridis.length - 1)));
    return d.viridis[i];
  }
  function text(x, y, s, anchor, side, index) {
    const t = document.createElementNS(svgNS, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("text-anchor", anchor);
    t.setAttribute("dominant-baseline", "middle"); t.textContent = s;
    t.dataset.side = side; t.dataset.index = index; svg.appendChild(t); return t;
  }
  function draw() {
    svg.replaceChildren();
    const layer = d.weights[+layerBox.value], heads = headBox.value === "all"
        ? layer.map((_, h) => h) : [+headBox.value];
    heads.forEach(h => {
      const w = layer[h], top = Math.max(0, ...w.flat().filter(value => value !== null));
      w.forEach((row, q) => row.forEach((value, k) => {
        if (value === null || value <= 0) return;                // null: NaN or infinite, a gap
        const line = document.createElementNS(svgNS, "line");
        line.setAttribute("x1", left + 6); line.setAttribute("y1", y0 + q * rowH);
        line.setAttribute("x2", right - 6); line.setAttribute("y2", y0 + k * rowH);
        line.setAttribute("stroke", heads.length > 1 ? d.headColours[h] : colourOf(value, top));
        line.setAttribute("stroke-width", 2.5);
        line.setAttribute("stroke-opacity", (top > 0 ? value / top : 0).toFixed(4));
        line.dataset.query = q; line.dataset.key = k; line.dataset.head = h; line.dataset.active = "true";
        svg.appendChild(line);
      }));
    });
    d.tokens.forEach((s, q) => {
      const t = text(left, y0 + q * rowH, s, "end", "query", q);
      t.addEventListener("mouseenter", () => focus(q, t));
      t.addEventListener("mouseleave", () => focus(null, t));
    });
    d.keyTokens.forEach((s, k) => text(right, y0 + k * rowH, s, "start", "key", k));
  }
  function focus(q, label) {
    svg.querySelectorAll("line").forEach(l => {
      l.dataset.active = String(q === null || +l.dataset.query === q);
    });
    label.classList.toggle("on", q !== null);
  }
  layerBox.addEventListener("change", draw); headBox.addEventListener("change", draw);
  draw();
}
"""


def _png_data_uri(image):
    """A (H, W) or (H, W, 3|4) image as a PNG data: URI, in grey when it has one channel (as the PNG figure)."""
    buffer = io.BytesIO()
    image = numpy.asarray(image, dtype=float)
    if image.ndim == 2:
        matplotlib.image.imsave(buffer, image, cmap="gray", format="png")
    else:
        low, high = image.min(), image.max()
        matplotlib.image.imsave(buffer, (image - low) / (high - low if high > low else 1), format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def patch_attention_html(image, maps, grid, rollout=None, prefix_tokens=1, title="attention over patches", size=320):
    """A ViT's attention over the patches of image as one self-contained HTML document (an HTMLView, a str).

    image: (H, W) or (H, W, C) host array. maps: a list over layers of (B, H, T, T) or (H, T, T) weights, or an
    array (layers, heads, T, T), where T = prefix_tokens + grid_h * grid_w (the class token, and DeiT's distillation
    token, come first). rollout: (T, T) or (B, T, T) attention rollout (interpret.attention_rollout), offered as one
    more layer. The query is the class token, or the patch hovered or clicked; the overlay is the query's weights
    over the patches, on inferno from 0 to their largest (the PNG figure's scale).
    """
    image = numpy.asarray(image, dtype=float)
    if image.ndim not in (2, 3) or image.size == 0:
        raise ValueError(f"patch_attention_html: the image must be (H, W) or (H, W, C) with pixels in it, got shape "
                         f"{image.shape}")
    if not numpy.isfinite(image).all():
        raise ValueError(f"patch_attention_html: {numpy.sum(~numpy.isfinite(image))} of the image's {image.size} "
                         "values are NaN or infinite; a picture of them would be a guess")
    maps = stack_maps(maps)
    grid_h, grid_w = grid
    tokens = maps.shape[-1]
    if tokens != prefix_tokens + grid_h * grid_w or maps.shape[-2] != tokens:
        raise ValueError(f"patch_attention_html: maps of {maps.shape[-2]} queries and {tokens} keys do not fit a "
                         f"{grid_h}x{grid_w} grid after {prefix_tokens} prefix token(s) "
                         f"({prefix_tokens + grid_h * grid_w} tokens)")
    layers = list(maps)
    names = [f"layer {i}" for i in range(len(layers))]
    if rollout is not None:
        rollout = numpy.asarray(rollout, dtype=float)
        rollout = rollout[0] if rollout.ndim == 3 else rollout
        if rollout.shape != (tokens, tokens):
            raise ValueError(f"patch_attention_html: rollout of shape {rollout.shape}, expected ({tokens}, {tokens})")
        layers.append(rollout[None])
        names.append("rollout")
    view = f"tinyattn-patch-view-{next(_views)}"
    height = int(round(size * image.shape[0] / image.shape[1]))
    data = {"id": view, "layers": [_weights(layer) for layer in layers], "names": names,
            "grid": [int(grid_h), int(grid_w)], "prefix": int(prefix_tokens), "inferno": _colour_table("inferno")}
    body = f"""<div class="tinyattn-view" id="{view}"><div class="controls">
<label>layer <select class="layer"></select></label><label>head <select class="head"></select></label>
<button class="cls">class token</button><span class="query"></span></div>
<div class="stage" style="width:{size}px;height:{height}px">
<img alt="the image" src="{_png_data_uri(image)}" width="{size}" height="{height}">
<div class="cells" style="grid-template-columns:repeat({grid_w},1fr);grid-template-rows:repeat({grid_h},1fr)">
</div></div></div>"""
    return _document(title, body, _SHARED_STYLE + _PATCH_VIEW_STYLE, _PATCH_VIEW_SCRIPT, data,
                     _gaps_note(layers, names))


_PATCH_VIEW_STYLE = """
.tinyattn-view .stage { position: relative; }
.tinyattn-view .stage img { position: absolute; left: 0; top: 0; image-rendering: pixelated; }
.tinyattn-view .cells { position: absolute; inset: 0; display: grid; }
.tinyattn-view .cells div { opacity: 0.55; }
.tinyattn-view .cells div.query { outline: 2px solid #0af; outline-offset: -2px; opacity: 0.8; }
"""

_PATCH_VIEW_SCRIPT = r"""
function tinyattnView(d) {
  const root = document.getElementById(d.id), cells = root.querySelector(".cells");
  const layerBox = root.querySelector("select.layer"), headBox = root.querySelector("select.head");
  const patches = d.grid[0] * d.grid[1];
  let query = 0;                                    // a token's index: 0 is the class token
  d.names.forEach((name, i) => layerBox.add(new Option(name, String(i))));
  for (let p = 0; p < patches; p++) {
    const cell = document.createElement("div");
    cell.dataset.patch = p;
    cell.addEventListener("mouseenter", () => { query = d.prefix + p; draw(); });
    cell.addEventListener("click", () => { query = d.prefix + p; draw(); });
    cells.appendChild(cell);
  }
  function fillHeads() {
    const heads = d.layers[+layerBox.value].length;
    headBox.replaceChildren();
    if (heads > 1) headBox.add(new Option("mean", "mean"));
    for (let h = 0; h < heads; h++) headBox.add(new Option(heads > 1 ? String(h) : "-", String(h)));
  }
  function row() {
    const layer = d.layers[+layerBox.value];
    if (headBox.value === "mean") {                 // a gap (null: NaN or infinite) in any head is a gap in the mean
      return layer[0][query].map((_, k) => layer.some(w => w[query][k] === null) ? null
          : layer.reduce((s, w) => s + w[query][k], 0) / layer.length);
    }
    return layer[+headBox.value][query];
  }
  function draw() {
    const weights = row().slice(d.prefix), top = Math.max(0, ...weights.filter(w => w !== null));
    cells.querySelectorAll("div").forEach((cell, p) => {
      const w = weights[p], gap = w === null;       // a gap shows the image through it
      const i = Math.min(d.inferno.length - 1, Math.round((top > 0 && !gap ? w / top : 0) * (d.inferno.length - 1)));
      cell.style.background = gap ? "transparent" : d.inferno[i];
      cell.dataset.weight = gap ? "NaN" : w.toFixed(5);
      cell.classList.toggle("query", d.prefix + p === query);
    });
    root.querySelector("span.query").textContent =
        query < d.prefix ? "query: class token" : "query: patch " + (query - d.prefix);
  }
  layerBox.addEventListener("change", () => { fillHeads(); draw(); });
  headBox.addEventListener("change", draw);
  root.querySelector("button.cls").addEventListener("click", () => { query = 0; draw(); });
  fillHeads(); draw();
}
"""


_SHADES = " ░▒▓█"
GAP = "?"                                    # a weight that is NaN or infinite, in the text view


def attention_text(weights, tokens, key_tokens=None, width=8, colour=True):
    """One head's (T, S) weights as text for a terminal: a row per query, a cell per key, shaded from blank (0) to a
    full block (the row set's largest weight); with colour, ANSI 256-colour greys as well. A weight that is NaN or
    infinite shows as "?", and a last line says how many there are. Returns the string."""
    weights = numpy.asarray(weights, dtype=float)
    key_tokens = tokens if key_tokens is None else key_tokens
    if weights.ndim != 2 or weights.shape != (len(tokens), len(key_tokens)):
        raise ValueError(f"attention_text takes one head's (T, S) weights with T tokens and S key tokens, got weights "
                         f"{weights.shape}, {len(tokens)} tokens and {len(key_tokens)} key tokens")
    finite = numpy.isfinite(weights)
    top = numpy.max(weights, where=finite, initial=0.0)
    top = top if top > 0 else 1.0
    label = max([len(str(t)[:width]) for t in tokens] + [1])
    lines = [f"{'':>{label}} keys: " + " ".join(str(k) for k in key_tokens)]
    for token, row in zip(tokens, weights):
        cells = []
        for value in row:
            if not numpy.isfinite(value):
                cells.append(GAP)
                continue
            level = value / top
            shade = _SHADES[min(len(_SHADES) - 1, int(round(level * (len(_SHADES) - 1))))]
            cells.append(f"\x1b[38;5;{232 + int(round(level * 23))}m{shade}\x1b[0m" if colour else shade)
        lines.append(f"{str(token)[:width]:>{label}} " + "".join(cells))
    if not finite.all():
        lines.append(f"{GAP}: {numpy.sum(~finite)} weights NaN or infinite")
    return "\n".join(lines)
