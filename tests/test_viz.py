"""tinyattn.viz: the autograd graph drawn from grad_fn.next_functions, the attention explorer, the static figures'
readability (colour bars, tick sizes, reference lines), and where save() sends a figure. Nothing needs a display."""
import numpy as np
import pytest
from matplotlib.transforms import Bbox

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn, viz


def _boxes(fig):
    return sorted(t.get_text() for t in fig.axes[0].texts if t.get_text())


def test_next_functions_lead_from_the_result_to_every_input_as_pytorchs_do():
    w = nn.Parameter(ta.randn(3, 4))
    x = ta.randn(2, 4)                                                      # needs no gradient: None, as in PyTorch
    y = F.linear(x, w).relu().sum()
    relu, = [node for node, _ in y.grad_fn.next_functions]
    linear, = [node for node, _ in relu.next_functions]
    assert [n.name() for n in (y.grad_fn, relu)] == ["SumBackward", "ReluBackward"]
    nexts = [node for node, _ in linear.next_functions]
    assert nexts[0] is None and nexts[1].name() == "AccumulateGrad" and nexts[1].variable is w


def test_draw_graph_names_every_operation_and_parameter_once():
    torch_like = nn.Linear(4, 3)
    h = torch_like(ta.randn(2, 4))
    y = (h * h).sum()                                                       # h is used twice: one box, two arrows
    fig = viz.draw_graph(y, torch_like)
    boxes = _boxes(fig)
    assert sum(b.startswith("Mul") for b in boxes) == 1
    assert f"weight\n(3, 4) {torch_like.weight.dtype}" in boxes and any(b.startswith("bias\n(3,)") for b in boxes)
    assert any(b.startswith("Sum\n()") for b in boxes)
    arrows = [a for a in fig.axes[0].texts if not a.get_text()]
    assert len(arrows) == 4                    # weight, bias -> Linear -> Mul -> Sum (Mul's two inputs, one arrow)
    y_of = {t.get_text().split("\n")[0]: t.get_position()[1] for t in fig.axes[0].texts if t.get_text()}
    assert y_of["weight"] > y_of[[k for k in y_of if "Linear" in k][0]] > y_of["Mul"] > y_of["Sum"]
    viz.plt.close(fig)


def test_draw_graph_without_a_module_calls_leaves_inputs_and_refuses_a_leaf():
    a = ta.randn(3, requires_grad=True)
    fig = viz.draw_graph((a * 2.0).exp())
    assert any(b.startswith("input\n(3,)") for b in _boxes(fig))
    viz.plt.close(fig)
    with pytest.raises(ValueError, match="no graph"):
        viz.draw_graph(a)


def test_draw_graph_handles_a_long_chain():
    h = ta.randn(4, requires_grad=True)
    for _ in range(1500):                                                   # deeper than Python's recursion limit
        h = h * 1.0
    fig = viz.draw_graph(h.sum())
    assert len(_boxes(fig)) == 1502
    viz.plt.close(fig)


def test_explorer_selects_layer_head_and_query():
    maps = np.random.default_rng(0).random((2, 1, 3, 4, 5))                # batch 1 of 2 layers, 3 heads, 4 x 5
    maps /= maps.sum(-1, keepdims=True)
    explorer = viz.explore_attention([m for m in maps], x_labels=list("abcde"), y_labels=list("wxyz"))
    explorer.select(layer=1, head=2, query=3)
    assert np.array_equal(explorer.image.get_array(), maps[1, 0, 2])
    assert np.allclose([bar.get_height() for bar in explorer.bars], maps[1, 0, 2, 3])
    assert "layer 1, head 2" in explorer.map_ax.get_title() and "'z'" in explorer.bar_ax.get_title()
    explorer.select(head=0)                                                 # the others stay
    assert (explorer.layer, explorer.head, explorer.query) == (1, 0, 3)
    explorer.add_sliders()
    explorer.sliders["head"].set_val(1)                                     # a slider moves the view
    assert explorer.head == 1 and set(explorer.sliders) == {"layer", "head", "query"}
    with pytest.raises(IndexError, match="head 3 is out of range: there are 3"):
        explorer.select(head=3)


def test_explorer_refuses_maps_it_cannot_show():
    with pytest.raises(ValueError, match=r"\(1, 4, 5\), \(1, 4, 6\)"):
        viz.AttentionExplorer([np.ones((1, 4, 5)), np.ones((1, 4, 6))])
    with pytest.raises(ValueError, match="2 key labels"):
        viz.AttentionExplorer(np.ones((1, 1, 4, 5)), x_labels=["a", "b"])


def test_heatmaps_carry_a_colour_bar_and_readable_ticks():
    fig = viz.attention_heatmap(np.eye(3), list("abc"), list("xyz"))
    assert len(fig.axes) == 2                                               # the heatmap and its colour bar
    assert all(t.get_fontsize() >= 8 for t in fig.axes[0].get_xticklabels() + fig.axes[1].get_yticklabels())
    viz.plt.close(fig)
    fig = viz.attention_grid(np.full((2, 2, 3, 3), 1 / 3), ["a", "\n", " "], ["a", "\n", " "])
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)
    for drawn in (fig.axes[2].get_xticklabels(), fig.axes[0].get_yticklabels()):   # bottom row, left column
        assert [t.get_text() for t in drawn] == ["a", "\\n", " "]              # a newline shown, not a line break
    viz.plt.close(fig)


def _panels(fig):
    """Each plot's axes with the colour bars of its images: the parts of one panel."""
    return [[ax] + [image.colorbar.ax for image in ax.images if image.colorbar]
            for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _overlapping_panels(fig):
    """Pairs of panels whose drawn text and axes (tight bounding boxes, after drawing) cross each other."""
    fig.draw_without_rendering()
    boxes = [Bbox.union([ax.get_tightbbox() for ax in panel]) for panel in _panels(fig)]
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


def _every_heatmap_has_its_colour_bar(fig):
    return all(image.colorbar is not None for ax in fig.axes for image in ax.images if ax.get_label() != "<colorbar>")


def test_side_by_side_heatmaps_keep_clear_of_each_other_and_each_has_its_colour_bar():
    rng = np.random.default_rng(0)
    sources = ["tue jun 17 2003", "January 17th 1985"]                    # lesson 02's panels: long titles, <eos>
    maps = [rng.dirichlet(np.ones(len(s)), size=11) for s in sources]
    outputs = [list("2003-06-17") + ["<eos>"], list("1985-01-17") + ["<eos>"]]
    tokens = "the cat sat on the mat".split()                            # lesson 03's
    drawn = [viz.attention_heatmaps(maps, [list(s) for s in sources], outputs, [f"{s} -> x" for s in sources]),
             viz.attention_heatmaps([np.eye(6), np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]],
                                    [tokens, tokens], [tokens, tokens], ["self-attention", "with a causal mask"]),
             viz.position_encoding(nn.sinusoidal_table(64, 64).numpy())]
    for fig, panels in zip(drawn, (2, 2, 2)):
        assert len(_panels(fig)) == panels and all(len(panel) == 2 for panel in _panels(fig))
        assert _overlapping_panels(fig) == [] and _every_heatmap_has_its_colour_bar(fig)
        viz.plt.close(fig)
    fig, axes = viz.plt.subplots(1, 2, figsize=(9, 3.6))             # as lesson 03 drew them: the check can fail
    for ax in axes:
        viz.attention_heatmap(np.eye(6), tokens, tokens, ax=ax)
    assert _overlapping_panels(fig) == [(0, 1)]
    viz.plt.close(fig)


def test_the_explorer_labels_keys_by_their_tokens_and_offers_only_choices_that_move():
    explorer = viz.explore_attention(np.full((1, 1, 3, 4), 0.25), x_labels=["a", "\n", "b", "c"],
                                     y_labels=list("xyz"))
    assert [t.get_text() for t in explorer.bar_ax.get_xticklabels()] == ["a", "\\n", "b", "c"]
    assert explorer.choices() == {"query": 3}                           # one layer, one head: nothing to move
    assert _overlapping_panels(explorer.figure) == []
    explorer.add_sliders()
    assert set(explorer.sliders) == {"query"} and _overlapping_panels(explorer.figure) == []   # nor the slider
    viz.plt.close(explorer.figure)


def test_head_scores_and_one_heads_pattern_are_drawn_with_a_colour_bar_and_their_labels():
    scores = np.array([[0.1, 0.95, 0.3], [0.0, 0.5, 1.0]])
    fig = viz.head_score_map(scores, title="induction score")
    heat, bar = fig.axes
    assert bar.get_label() == "<colorbar>" and bar.get_ylabel() == "score"
    assert np.array_equal(np.asarray(heat.images[0].get_array()), scores)
    assert sorted(t.get_text() for t in heat.texts) == sorted(f"{v:.2f}" for v in scores.ravel())
    assert [t.get_text() for t in heat.get_xticklabels()] == ["0", "1", "2"] and heat.get_ylabel() == "layer"
    viz.plt.close(fig)
    tokens = [7, 3, "a", "\n"]
    fig = viz.head_pattern(np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None], tokens, title="layer 1, head 2")
    heat = fig.axes[0]
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes) and heat.get_title() == "layer 1, head 2"
    for drawn in (heat.get_xticklabels(), heat.get_yticklabels()):
        assert [t.get_text() for t in drawn] == ["7", "3", "a", "\\n"]
    viz.plt.close(fig)
    with pytest.raises(ValueError, match=r"\(T, T\) weights and T tokens, got weights \(4, 4\) and 3 tokens"):
        viz.head_pattern(np.eye(4), [1, 2, 3])


def test_bars_and_attention_distance_draw_what_they_are_given():
    fig = viz.bars({"a": [1.0, 2.0], "b": [3.0, 4.0]}, errors={"a": [0.1, 0.2], "b": [0.0, 0.1]},
                   group_labels=["T", "2T"], hlines={"baseline": 2.5}, ymin=0.5)
    ax = fig.axes[0]
    assert sorted(round(p.get_height(), 6) for p in ax.patches) == [1.0, 2.0, 3.0, 4.0]
    assert ax.get_ylim()[0] == 0.5
    viz.plt.close(fig)
    fig = viz.attention_distance(np.full((2, 3), 8.0), uniform=8.0, limits=(0, 14))
    assert fig.axes[0].get_ylim() == (0, 14)
    viz.plt.close(fig)


def test_relative_bias_is_drawn_by_where_the_key_sits_from_the_query():
    bias = nn.RelativePositionBias(2, num_heads=1)
    with ta.no_grad():
        bias.table.zero_()
    query, key = 2, 0                      # tokens (1, 0) and (0, 0) of a 2x2 window: the key is one row above
    with ta.no_grad():
        row = int(bias.index.numpy()[query, key])
        bias.table[row, 0] = 1.0
    assert bias().numpy()[0, query, key] == 1.0
    fig = viz.relative_bias([bias.table.numpy()], 2, ["block 0"])
    drawn = np.asarray(fig.axes[0].images[0].get_array())
    assert drawn[0, 1] == 1.0 and drawn.sum() == 1.0     # dy = -1 (row of offset -1), dx = 0 (the middle column)
    assert fig.axes[0].get_title() == "block 0, head 0" and "key row - query row" in fig.axes[0].get_ylabel()
    viz.plt.close(fig)


def test_save_writes_the_file_says_where_and_frees_the_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TINYATTN_SHOW_FIGURES", raising=False)
    fig = viz.curves({"loss": [3.0, 2.0, 1.5]})
    path = viz.save(fig, str(tmp_path / "runs" / "curve.png"))
    assert (tmp_path / "runs" / "curve.png").stat().st_size > 1000
    assert "figure: " in capsys.readouterr().out and path.endswith("curve.png")
    assert fig.number not in viz.plt.get_fignums()


def test_curves_keep_the_colours_asked_for_and_draw_a_second_axis():
    fig = viz.curves({"first copy": [3.0, 2.0]}, colors={"first copy": "C3", "score": "C5"},
                     secondary={"score": [0.1, 0.9]}, ylabel2="score")
    left, right = fig.axes
    assert left.lines[0].get_color() == "C3" and right.lines[0].get_color() == "C5"
    assert right.get_ylabel() == "score" and list(right.lines[0].get_ydata()) == [0.1, 0.9]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["first copy", "score"]
    viz.plt.close(fig)
