"""viz's attention views that need no server and no network: the head view and the patch view as self-contained
HTML (checked as text here, and driven in a real headless Chromium), and the terminal's text view."""
import json
import re

import matplotlib
import numpy as np
import pytest

from tinyattn import viz
from browser import chromium, console_errors, requested_urls


def _maps(layers=2, heads=3, t=5, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.dirichlet(np.ones(t), size=(1, heads, t)) for _ in range(layers)]   # per layer (B, H, T, T)


def _data(document):
    """The JSON a view was built from, as the page's script receives it."""
    return json.loads(re.search(r"tinyattnView\((\{.*\})\);</script>", document).group(1))


OFF_PAGE = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|"""
                      r"""@import|\bimport\s*\(|\bfrom\s*["']https?:|<link\b""", re.IGNORECASE)


def test_the_head_view_is_one_document_that_loads_nothing_from_elsewhere():
    maps = _maps()
    document = viz.attention_html(maps, list("abcde"), title="two layers")
    assert document.startswith("<!DOCTYPE html>") and document.count("<html") == 1
    assert not OFF_PAGE.search(document)
    assert OFF_PAGE.search('<script src="https://cdn.example/x.js"></script>')        # the pattern can fail
    data = _data(document)
    assert np.allclose(np.array(data["weights"]), np.stack([m[0] for m in maps]), atol=5e-6)
    assert data["tokens"] == data["keyTokens"] == list("abcde")
    viridis = matplotlib.colormaps["viridis"]                       # the PNG heatmaps' scale, end to end
    assert data["viridis"][0] == matplotlib.colors.to_hex(viridis(0.0))
    assert data["viridis"][-1] == matplotlib.colors.to_hex(viridis(1.0))
    assert document._repr_html_() == str(document)


def test_two_views_on_one_page_keep_apart_and_save_writes_the_document(tmp_path):
    first, second = viz.attention_html(_maps(), list("abcde")), viz.attention_html(_maps(), list("abcde"))
    assert _data(first)["id"] != _data(second)["id"]
    path = first.save(tmp_path / "view.html")
    assert path.read_text(encoding="utf-8") == first


def test_the_views_refuse_maps_that_do_not_fit_naming_the_shapes():
    with pytest.raises(ValueError, match="5 queries and 5 keys, got 4 tokens"):
        viz.attention_html(_maps(), list("abcd"))
    with pytest.raises(ValueError, match="layer 2 and head 0 for maps of 2 layers"):
        viz.attention_html(_maps(), list("abcde"), layer=2)
    with pytest.raises(ValueError, match=r"do not fit a 2x3 grid after 1 prefix token\(s\) \(7 tokens\)"):
        viz.patch_attention_html(np.zeros((8, 8)), _maps(t=5), (2, 3))
    with pytest.raises(ValueError, match=r"rollout of shape \(4, 4\), expected \(5, 5\)"):
        viz.patch_attention_html(np.zeros((8, 8)), _maps(t=5), (2, 2), rollout=np.eye(4))


def test_the_patch_view_carries_its_image_and_offers_rollout_as_one_more_layer():
    maps = _maps(t=5)
    rollout = np.full((1, 5, 5), 0.2)
    document = viz.patch_attention_html(np.random.default_rng(0).random((8, 8)), maps, (2, 2), rollout=rollout)
    assert not OFF_PAGE.search(document)
    assert 'src="data:image/png;base64,' in document
    data = _data(document)
    assert data["names"] == ["layer 0", "layer 1", "rollout"]
    assert np.allclose(np.array(data["layers"][1]), maps[1][0], atol=5e-6)
    assert np.allclose(np.array(data["layers"][2][0]), rollout[0])
    assert data["inferno"][-1] == matplotlib.colors.to_hex(matplotlib.colormaps["inferno"](1.0))


def test_attention_text_shades_each_weight_against_the_largest():
    weights = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])
    text = viz.attention_text(weights, ["x", "yy", "z"], colour=False)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].endswith("keys: x yy z")
    assert lines[1] == " x █  " and lines[2] == "yy ▒▒ " and lines[3] == " z  ░▓"
    coloured = viz.attention_text(weights, ["x", "yy", "z"])
    assert "\x1b[38;5;255m█\x1b[0m" in coloured and "\x1b[38;5;232m \x1b[0m" in coloured
    with pytest.raises(ValueError, match=r"got weights \(3, 3\), 2 tokens and 2 key tokens"):
        viz.attention_text(weights, ["a", "b"])


def test_the_views_respond_in_a_real_browser(tmp_path):
    driver = chromium()
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    try:
        maps = _maps(layers=1, heads=2, t=5)
        path = viz.attention_html(maps, list("abcde")).save(tmp_path / "head.html")
        driver.get(path.as_uri())
        lines = driver.find_elements(By.CSS_SELECTOR, "line")
        assert len(lines) == int((maps[0][0, 0] > 0).sum())           # head 0 first, a line per nonzero weight
        queries = driver.find_elements(By.CSS_SELECTOR, "text[data-side=query]")
        ActionChains(driver).move_to_element(queries[3]).perform()
        active = driver.find_elements(By.CSS_SELECTOR, "line[data-active=true]")
        assert {line.get_attribute("data-query") for line in active} == {"3"} and len(active) == 5

        maps = _maps(layers=1, heads=1, t=5)
        path = viz.patch_attention_html(np.random.default_rng(0).random((8, 8)), maps, (2, 2)).save(
            tmp_path / "patch.html")
        driver.get(path.as_uri())
        cells = driver.find_elements(By.CSS_SELECTOR, ".cells div")
        shown = [float(cell.get_attribute("data-weight")) for cell in cells]
        assert np.allclose(shown, maps[0][0, 0, 0, 1:], atol=1e-5)             # the class token's row first
        ActionChains(driver).move_to_element(cells[2]).perform()
        shown = [float(cell.get_attribute("data-weight")) for cell in cells]
        assert np.allclose(shown, maps[0][0, 0, 3, 1:], atol=1e-5)             # patch 2 is token 3
        assert console_errors(driver) == []
        assert [url for url in requested_urls(driver) if not url.startswith(("file:", "data:"))] == []
    finally:
        driver.quit()


def test_the_explorer_prints_its_map_as_text_when_stepping_without_a_display(monkeypatch, capsys):
    weights = np.array([[[[1.0, 0.0], [0.25, 0.75]]]])                 # (layers, heads, queries, keys)
    monkeypatch.setenv("TINYATTN_SHOW_FIGURES", "0")                  # what the stepper sets over SSH
    viz.explore_attention(weights, ["a", "b"], ["x", "y"], title="toy")
    out = capsys.readouterr().out
    assert out.startswith("toy, layer 0, head 0") and viz.attention_text(weights[0, 0], ["x", "y"], ["a", "b"]) in out
    monkeypatch.delenv("TINYATTN_SHOW_FIGURES")                       # a plain script prints nothing
    viz.explore_attention(weights, ["a", "b"], ["x", "y"], title="toy")
    assert capsys.readouterr().out == ""


# Tokens and a title that would run script or break the page if written into it as they are.
HOSTILE = ["</script><script>window.ran = 'tokens'</script>", "<!--", "a\u2028b\u2029c", "&amp; &lt;",
           "<img src=x onerror=\"window.ran = 'img'\">"]
HOSTILE_TITLE = "</title></head><script>window.ran = 'title'</script>"


def test_hostile_tokens_stay_data_in_the_page_text():
    document = viz.attention_html(_maps(t=5), HOSTILE, title=HOSTILE_TITLE)
    assert document.count("</script>") == 2 and document.count("<script>") == 2     # the code's and the data's
    assert "<!--" not in document and "\u2028" not in document and "\u2029" not in document
    assert _data(document)["tokens"] == HOSTILE                                      # JSON escapes, same characters


def test_hostile_tokens_and_titles_run_nothing_and_every_view_still_draws(tmp_path):
    driver = chromium()
    from selenium.webdriver.common.by import By
    import tinyattn.functional as F
    try:
        maps = _maps(layers=1, heads=2, t=5)
        driver.get(viz.attention_html(maps, HOSTILE, title=HOSTILE_TITLE).save(tmp_path / "head.html").as_uri())
        assert driver.execute_script("return window.ran === undefined && document.images.length === 0")
        assert driver.title == HOSTILE_TITLE
        shown = [t.get_attribute("textContent") for t in driver.find_elements(By.CSS_SELECTOR, "text[data-side=query]")]
        assert shown == HOSTILE
        assert len(driver.find_elements(By.CSS_SELECTOR, "line")) == int((maps[0][0, 0] > 0).sum())

        page = viz.patch_attention_html(np.random.default_rng(0).random((8, 8)), maps, (2, 2), title=HOSTILE_TITLE)
        driver.get(page.save(tmp_path / "patch.html").as_uri())
        assert driver.execute_script("return window.ran === undefined") and driver.title == HOSTILE_TITLE
        assert len(driver.find_elements(By.CSS_SELECTOR, ".cells div[data-weight]")) == 4

        rng = np.random.default_rng(0)
        trace = F.trace_flash_attention(*(rng.standard_normal((1, 1, 8, 4)) for _ in range(3)), block_size=4)
        page = viz.flash_player_html(trace.records, steps=[0, 1], title=HOSTILE_TITLE)
        driver.get(page.save(tmp_path / "flash.html").as_uri())
        assert driver.execute_script("return window.ran === undefined") and driver.title == HOSTILE_TITLE
        assert driver.find_element(By.CSS_SELECTOR, ".tinyattn-view").get_attribute("data-step") == "0"
        assert console_errors(driver) == []
    finally:
        driver.quit()


def _with_gaps():
    """One layer of two heads over 4 tokens; head 1 holds a NaN and an infinity (what a broken run can leave)."""
    maps = np.stack([_maps(layers=1, heads=2, t=4)[0][0]])          # (layers, heads, T, T)
    maps[0, 1, 2, 1], maps[0, 1, 3, 0] = np.nan, np.inf
    return maps


def test_weights_that_are_nan_or_infinite_are_named_and_left_as_gaps():
    maps = _with_gaps()
    document = viz.attention_html(maps, list("abcd"), head=1)
    assert "weights that are NaN or infinite, drawn as gaps: layer 0 head 1 (2)</p>" in document
    weights = _data(document)["weights"]
    assert weights[0][1][2][1] is None and weights[0][1][3][0] is None
    assert sum(w is None for w in np.ravel(np.array(weights, dtype=object))) == 2
    assert "<p class=\"tinyattn-note\">" not in viz.attention_html(maps[:, :1], list("abcd"))    # head 0: no note
    patch = viz.patch_attention_html(np.zeros((4, 4)), np.pad(maps, ((0, 0), (0, 0), (0, 1), (0, 1))), (2, 2))
    assert "layer 0 head 1 (2)" in patch
    lines = viz.attention_text(maps[0, 1], list("abcd"), colour=False).splitlines()
    assert lines[3][2 + 1] == "?" and lines[4][2 + 0] == "?"                # rows c and d after the keys' line
    assert lines[-1] == "?: 2 weights NaN or infinite" and "?" not in "".join(lines[1:3])
    explorer = viz.AttentionExplorer(maps, list("abcd"), list("abcd"))
    assert np.isfinite(explorer.image.get_clim()).all() and explorer.image.get_clim()[1] > 0
    assert "NaN" not in explorer.map_ax.get_title()
    explorer.select(head=1, query=2)
    assert "2 weights NaN or infinite (gaps)" in explorer.map_ax.get_title()
    heights = [bar.get_height() for bar in explorer.bars]
    assert heights[1] == 0 and np.isfinite(heights).all()
    viz.plt.close(explorer.figure)


def test_a_head_with_gaps_still_draws_its_finite_weights_in_a_real_browser(tmp_path):
    driver = chromium()
    from selenium.webdriver.common.by import By
    try:
        maps = _with_gaps()
        driver.get(viz.attention_html(maps, list("abcd"), head=1).save(tmp_path / "head.html").as_uri())
        lines = driver.find_elements(By.CSS_SELECTOR, "line")
        finite = np.isfinite(maps[0, 1])
        assert len(lines) == int((maps[0, 1][finite] > 0).sum())
        opacity = [float(line.get_attribute("stroke-opacity")) for line in lines]
        assert np.isfinite(opacity).all() and max(opacity) == 1.0                   # scaled by the finite largest
        assert "layer 0 head 1 (2)" in driver.find_element(By.CSS_SELECTOR, ".tinyattn-note").text

        patches = np.pad(maps, ((0, 0), (0, 0), (0, 1), (0, 1)))                      # one prefix token, 2x2 patches
        patches[0, :, 0, 1:] = [[0.1, np.nan, 0.3, 0.6], [0.2, 0.2, 0.2, 0.4]]       # the class token's rows
        driver.get(viz.patch_attention_html(np.zeros((4, 4)), patches, (2, 2)).save(tmp_path / "p.html").as_uri())
        cells = driver.find_elements(By.CSS_SELECTOR, ".cells div")
        assert [c.get_attribute("data-weight") for c in cells] == ["0.15000", "NaN", "0.25000", "0.50000"]  # mean
        assert console_errors(driver) == []
    finally:
        driver.quit()


def test_the_patch_view_refuses_an_empty_image_or_one_with_nan_pixels():
    with pytest.raises(ValueError, match=r"with pixels in it, got shape \(0, 8\)"):
        viz.patch_attention_html(np.zeros((0, 8)), _maps(t=5), (2, 2))
    image = np.zeros((8, 8))
    image[3, 4] = np.nan
    with pytest.raises(ValueError, match="1 of the image's 64 values are NaN or infinite"):
        viz.patch_attention_html(image, _maps(t=5), (2, 2))
