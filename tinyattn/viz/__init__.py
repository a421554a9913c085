"""Seeing what a model does: the lessons' figures (figures.py), the autograd graph behind a tensor (graph.py),
attention maps to explore by layer, head and query (explorer.py), the same as self-contained HTML views and as text
for a terminal (attention_html.py), flash attention stepped tile by tile from a trace's records (flash.py: frames,
a GIF, an HTML player), and where a figure goes once drawn (display.py).
The figures take host NumPy arrays (call Tensor.numpy() first) and return a matplotlib figure; draw_graph takes the
tensor whose graph it draws, explore_attention returns an explorer, save returns the path it wrote (in a notebook
None: the figure shown is the cell's output)."""
import matplotlib.pyplot as plt  # noqa: F401  (lessons lay out their own figures with viz.plt)

from .attention_html import HTMLView, attention_html, attention_text, patch_attention_html
from .display import announce, save
from .explorer import AttentionExplorer, explore_attention
from .figures import (TICK_SIZE, attention_distance, attention_grid, attention_heatmap, attention_heatmaps, bars,
                      curves, head_pattern, head_score_map, patch_attention, patching_map, position_encoding,
                      position_similarity, relative_bias)
from .flash import flash_animation, flash_frame, flash_player_html
from .graph import draw_graph

__all__ = ["AttentionExplorer", "HTMLView", "TICK_SIZE", "announce", "attention_distance", "attention_grid",
           "attention_heatmap", "attention_heatmaps", "attention_html", "attention_text", "bars", "curves",
           "draw_graph", "explore_attention", "flash_animation", "flash_frame", "flash_player_html", "head_pattern",
           "head_score_map", "patch_attention", "patch_attention_html", "patching_map", "plt", "position_encoding",
           "position_similarity", "relative_bias", "save"]
