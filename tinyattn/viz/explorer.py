"""Attention you can explore: pick a layer, a head and a query and see where that query looks, over the weights the
models keep (need_weights=True, return_attention=True). In a notebook the controls are ipywidgets sliders; in a
window (stepping a lesson on a display) matplotlib sliders; elsewhere there is the figure alone, moved by select()."""
import matplotlib.pyplot as plt
import numpy

from .attention_html import attention_html, attention_text
from .display import in_notebook, showing_windows, static_page, stepping_without_windows
from .figures import TICK_SIZE, _token_labels, attention_heatmap, stack_maps

MAX_TICK_LABELS = 40          # beyond this many tokens an axis shows numbers, not labels


class AttentionExplorer:
    """The weights of one layer and head as a heatmap, the chosen query marked, and that query's row as bars.
    select(layer, head, query) redraws; the figure is .figure."""

    def __init__(self, maps, x_labels=None, y_labels=None, title="attention"):
        self.maps = stack_maps(maps)
        layers, heads, queries, keys = self.maps.shape
        self.x_labels = [str(t) for t in x_labels] if x_labels is not None else [str(i) for i in range(keys)]
        self.y_labels = [str(t) for t in y_labels] if y_labels is not None else [str(i) for i in range(queries)]
        if len(self.x_labels) != keys or len(self.y_labels) != queries:
            raise ValueError(f"{len(self.x_labels)} key labels and {len(self.y_labels)} query labels for maps of "
                             f"{queries} queries and {keys} keys")
        self.title = title
        self.figure, (self.map_ax, self.bar_ax) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained",
                                                               gridspec_kw={"width_ratios": [3, 2]})
        attention_heatmap(self.maps[0, 0], self.x_labels if keys <= MAX_TICK_LABELS else None,
                          self.y_labels if queries <= MAX_TICK_LABELS else None, ax=self.map_ax)
        self.image = self.map_ax.images[0]
        top = numpy.max(self.maps, where=numpy.isfinite(self.maps), initial=0.0)
        self.image.set_clim(0, max(top, 1e-9))                  # one colour scale for every layer and head
        self.marker = self.map_ax.axhline(0, color="white", lw=1.5)
        self.bars = self.bar_ax.bar(range(keys), self.maps[0, 0, 0], color="tab:blue")
        if keys <= MAX_TICK_LABELS:                     # the keys by their tokens, as on the heatmap's axis
            self.bar_ax.set_xticks(range(keys), labels=_token_labels(self.x_labels), rotation=90)
        self.bar_ax.set_ylim(0, 1)
        self.bar_ax.set_xlabel("key", fontsize=9)
        self.bar_ax.set_ylabel("weight", fontsize=9)
        self.bar_ax.tick_params(labelsize=TICK_SIZE)
        self.layer = self.head = self.query = 0
        self.select(0, 0, 0)

    def select(self, layer=None, head=None, query=None):
        """Show this layer, head and query (None keeps the current one). Returns self."""
        chosen = [self.layer if layer is None else int(layer), self.head if head is None else int(head),
                  self.query if query is None else int(query)]
        for name, value, count in zip(("layer", "head", "query"), chosen, self.maps.shape):
            if not 0 <= value < count:
                raise IndexError(f"{name} {value} is out of range: there are {count}")
        self.layer, self.head, self.query = chosen
        weights = numpy.ma.masked_invalid(self.maps[self.layer, self.head])   # NaN or infinite: a gap
        self.image.set_data(weights)
        self.marker.set_ydata([self.query, self.query])
        for bar, height in zip(self.bars, weights[self.query].filled(0.0)):
            bar.set_height(height)
        gaps = numpy.ma.count_masked(weights)
        self.map_ax.set_title(f"{self.title}: layer {self.layer}, head {self.head}"
                              + (f"\n{gaps} weights NaN or infinite (gaps)" if gaps else ""), fontsize=10)
        self.bar_ax.set_title(f"where query {self.y_labels[self.query]!r} looks", fontsize=10)
        self.figure.canvas.draw_idle()
        return self

    def choices(self):
        """{name: count} of layer, head and query, for those that have more than one to choose from: a slider for
        one layer or one head could not move."""
        return {name: count for name, count in zip(("layer", "head", "query"), self.maps.shape) if count > 1}

    def add_sliders(self):
        """matplotlib sliders under the figure, one for each of layer, head and query that has a choice."""
        from matplotlib.widgets import Slider
        self.figure.get_layout_engine().set(rect=(0, 0.25, 1, 0.75))        # the plots above, the sliders below
        self.sliders = {}
        for i, (name, count) in enumerate(self.choices().items()):
            ax = self.figure.add_axes([0.15, 0.17 - 0.05 * i, 0.6, 0.03])
            slider = Slider(ax, name, 0, count - 1, valinit=0, valstep=1)
            slider.on_changed(lambda value, name=name: self.select(**{name: value}))
            self.sliders[name] = slider
        return self


def explore_attention(maps, x_labels=None, y_labels=None, title="attention"):
    """An AttentionExplorer with its controls where it is shown: ipywidgets sliders in a notebook, matplotlib
    sliders in a window when stepping a lesson on a display; on a static page (the course site) the HTML head view
    (attention_html), which needs no kernel; when stepping in a terminal without a display, the first layer and
    head as text (attention_text); elsewhere (a script, a test) the figure alone, not shown: call
    .select(layer, head, query) and save .figure."""
    explorer = AttentionExplorer(maps, x_labels, y_labels, title)
    if in_notebook():
        from IPython.display import HTML, display
        if static_page():
            display(HTML(attention_html(explorer.maps, explorer.y_labels, explorer.x_labels, title=title)))
            plt.close(explorer.figure)
            return explorer
        try:
            import ipywidgets
        except ImportError:
            print("the figure alone: sliders need ipywidgets (pip install -e '.[notebook]')")
            display(explorer.figure)
            plt.close(explorer.figure)
            return explorer

        def show(**chosen):                          # interact clears its output and shows the redrawn figure
            display(explorer.select(**chosen).figure)
        sliders = {name: ipywidgets.IntSlider(0, 0, count - 1) for name, count in explorer.choices().items()}
        plt.close(explorer.figure)                   # shown by interact, not a second time by the inline backend
        ipywidgets.interact(show, **sliders)
    elif showing_windows():
        explorer.add_sliders()
        plt.show(block=False)
    else:
        if stepping_without_windows():               # an SSH login: the map where the learner can see it
            print(f"{title}, layer 0, head 0 (explorer.select(layer, head) redraws the figure for another):\n"
                  + attention_text(explorer.maps[0, 0], explorer.y_labels, explorer.x_labels), flush=True)
        plt.close(explorer.figure)                   # nothing will show it; select() still redraws it for saving
    return explorer
