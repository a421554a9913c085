"""viz/flash.py: flash attention's trace as frames, a GIF and a self-contained HTML player. No display needed."""
import re

import numpy as np
import pytest
from PIL import Image

import tinyattn.functional as F
from tinyattn import viz
from tinyattn.viz.flash import step_state
from browser import chromium, console_errors, requested_urls
from test_attention_views import OFF_PAGE


@pytest.fixture(scope="module")
def trace():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 48, 8)) for _ in range(3))
    return F.trace_flash_attention(q, k, v, is_causal=True, block_size=16)


def test_a_forward_step_shows_the_tiles_seen_the_running_m_and_the_output_so_far(trace):
    records = trace.records
    state = step_state(records, 3, trace.output)            # causal 3 x 3 blocks: step 3 is rows 32-47, keys 0-15
    assert state["tile"] == (32, 48, 0, 16)
    assert np.isfinite(state["matrix"][:32, :1]).all() and np.isnan(state["matrix"][32:, 16:]).all()
    np.testing.assert_array_equal(state["m"][32:], records[3]["m"][0, 0, :, 0])
    np.testing.assert_array_equal(state["partial"][32:], records[3]["partial"][0, 0])
    np.testing.assert_array_equal(state["partial"][:16], trace.output[0, 0, :16])     # finished rows: the output
    assert state["tile_bytes"] < state["matrix_bytes"]
    fig = viz.flash_frame(records, 3, trace.output)
    assert len(fig.axes) == 4
    assert fig._suptitle.get_text().startswith("forward tile 4 of 6 (query rows 32-47, keys 0-15); rescale")
    viz.plt.close(fig)


def test_a_backward_step_accumulates_dq_towards_the_true_one(trace):
    records = trace.records
    last = len(records) - 1
    state = step_state(records, last, trace.output, trace.grads)
    assert state["pass"] == "backward" and state["m"] is None
    np.testing.assert_allclose(state["partial"], state["true"], rtol=0, atol=1e-13)
    np.testing.assert_array_equal(state["lit"], records[last]["p"][0, 0])


def test_the_gif_has_one_frame_per_step(trace, tmp_path):
    path = viz.flash_animation(trace.records, tmp_path / "flash.gif", trace.output, steps=[0, 1, 2])
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames == 3


def test_the_html_player_is_one_document_with_next_previous_and_play(trace, tmp_path):
    player = viz.flash_player_html(trace.records, trace.output, steps=[0, 1, 2, 3])
    assert isinstance(player, viz.HTMLView) and player._repr_html_() == str(player)
    assert player.count("data:image/png;base64,") == 4
    assert not OFF_PAGE.search(player)
    for control in ("previous", "next", "play"):
        assert f'class="{control}"' in player
    assert "forward tile 4 of 6 (query rows 32-47, keys 0-15)" in player
    saved = player.save(tmp_path / "flash.html")
    assert open(saved, encoding="utf-8").read().startswith("<!DOCTYPE html>")


def test_the_player_steps_in_a_real_browser(trace, tmp_path):
    driver = chromium()
    from selenium.webdriver.common.by import By
    try:
        path = viz.flash_player_html(trace.records, trace.output, steps=[0, 1, 2]).save(tmp_path / "flash.html")
        driver.get(path.as_uri())
        root = driver.find_element(By.CSS_SELECTOR, ".tinyattn-view")
        caption = driver.find_element(By.CSS_SELECTOR, ".caption")
        assert root.get_attribute("data-step") == "0"
        assert caption.text.startswith("forward tile 1 of 6 (query rows 0-15, keys 0-15)")
        driver.find_element(By.CSS_SELECTOR, "button.next").click()
        driver.find_element(By.CSS_SELECTOR, "button.next").click()
        assert root.get_attribute("data-step") == "2"
        assert caption.text.startswith("forward tile 3 of 6 (query rows 16-31, keys 16-31)")
        driver.find_element(By.CSS_SELECTOR, "button.previous").click()
        assert root.get_attribute("data-step") == "1"
        assert driver.find_element(By.CSS_SELECTOR, "img.frame").get_attribute("src").startswith("data:image/png")
        assert console_errors(driver) == []
        assert [url for url in requested_urls(driver) if not url.startswith(("file:", "data:"))] == []
    finally:
        driver.quit()


def test_the_views_take_the_trace_itself_with_its_output_and_grads(trace, tmp_path):
    """What trace_flash_attention returns goes in as it is: its records, and its output and grads unless given."""
    last = len(trace.records) - 1
    whole = step_state(trace, last)
    np.testing.assert_array_equal(whole["true"], trace.grads[0][0, 0])
    assert whole["title"] == step_state(trace.records, last, trace.output, trace.grads)["title"]
    assert whole["title"].startswith("backward tile 6 of 6 (query rows 32-47, keys 32-47); P = exp(S - L)")
    assert step_state(trace.records, last)["true"] is None
    player = viz.flash_player_html(trace, steps=[0, last])
    assert player.count("data:image/png;base64,") == 2 and "backward tile 6 of 6" in player
    viz.plt.close(viz.flash_frame(trace, 0))
    with Image.open(viz.flash_animation(trace, tmp_path / "trace.gif", steps=[0, 1])) as gif:
        assert gif.n_frames == 2


def test_records_that_are_not_a_trace_are_refused(trace):
    with pytest.raises(ValueError, match="trace_flash_attention"):
        viz.flash_frame([{"rows": (0, 1)}], 0)
    with pytest.raises(IndexError, match="outside"):
        viz.flash_frame(trace.records, len(trace.records))


def test_no_steps_is_refused_with_the_steps_there_are(trace, tmp_path):
    last = len(trace.records) - 1
    with pytest.raises(ValueError, match=rf"steps=\[\]: no step to draw; .* \(0 to {last}\)"):
        viz.flash_player_html(trace.records, steps=[])
    with pytest.raises(ValueError, match=r"steps=\[\]"):
        viz.flash_animation(trace.records, tmp_path / "none.gif", steps=[])
    assert not (tmp_path / "none.gif").exists()
