"""Where a figure goes once it is drawn: always to a file; inline in a notebook, elsewhere announced by its path; in
a window as well when a lesson is stepped through on a display (the stepper sets TINYATTN_SHOW_FIGURES=1). A plain
script or a test shows nothing, so no display is ever needed."""
import os
import sys

import matplotlib.pyplot as plt


def in_notebook():
    """True inside a Jupyter kernel (ipykernel imported, by a test say, is not one: the shell must have a kernel)."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython
    return getattr(get_ipython(), "kernel", None) is not None


def static_page():
    """True where a notebook runs to be read as a page (the course site sets TINYATTN_STATIC_PAGE=1 for its kernels):
    no kernel will be there to answer a slider, so views that need none (self-contained HTML) stand in for widgets."""
    return os.environ.get("TINYATTN_STATIC_PAGE") == "1"


def stepping_without_windows():
    """True when a lesson is stepped through where no window can open (the stepper sets TINYATTN_SHOW_FIGURES=0 there:
    an SSH login, a terminal without a display): text views stand in for figures on screen."""
    return not in_notebook() and os.environ.get("TINYATTN_SHOW_FIGURES") == "0"


def showing_windows():
    """True when figures should also open in windows (stepping a lesson on a display)."""
    return not in_notebook() and os.environ.get("TINYATTN_SHOW_FIGURES") == "1"


def announce(what, path, note=""):
    """Say where a file of the run was written ("figure: plots/runs/x.png"), relative to the current folder; nothing
    in a notebook, whose reader sees the figure itself and has no use for a path on the machine that ran it.
    Returns path."""
    if not in_notebook():
        print(f"{what}: {os.path.relpath(path)}{note}", flush=True)
    return path


def save(fig, path):
    """Write fig, a matplotlib figure or an HTML view (attention_html), to path (folders created) and show it where
    it can be seen: inline in a notebook, elsewhere its path (and a figure in a window when stepping on a display).
    Returns the path; in a notebook None, as the figure is what the cell shows (a path returned by a cell's last
    line would be echoed under it)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if isinstance(fig, str):                       # an HTML view: the document is the str
        with open(path, "w", encoding="utf-8") as file:
            file.write(fig)
        if in_notebook():
            from IPython.display import HTML, display
            display(HTML(str(fig)))
            return None
        return announce("view", path, " (open it in a browser)")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    if in_notebook():
        from IPython.display import display
        display(fig)
        path = None
    else:
        announce("figure", path)
        if showing_windows():
            plt.show(block=False)
            plt.pause(0.001)
            return path
    plt.close(fig)              # shown (or not needed): free it, so a long lesson does not pile up open figures
    return path
