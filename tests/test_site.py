"""The course site (mkdocs.yml, docs/site_hooks.py): a small quick build (the home page and lessons 04, 06 and 08),
read as files and then served on 127.0.0.1 to headless Chromium; a small default build, of a lesson whose run is
stored in docs/executed/; the stored runs' bookkeeping. The full quick site is built by .ci/run before the tests;
`site_offline_problems` checks it too when it is there."""
import base64
import functools
import html
import http.server
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from browser import chromium, console_errors, requested_urls

ROOT = Path(__file__).resolve().parent.parent

# A resource a page would fetch from elsewhere: the src of a script, image or frame, the href of a stylesheet or an
# icon, an import in a script, a url() in a style. A link (<a href>) to a paper may leave the site; nothing loaded may.
FETCHED = [re.compile(pattern, re.IGNORECASE | re.DOTALL) for pattern in (
    r"<(?:script|img|iframe|source|video|audio|embed)\b[^>]*\bsrc\s*=\s*[\"']?\s*(?:https?:)?//",
    r"<link\b[^>]*\bhref\s*=\s*[\"']?\s*(?:https?:)?//",
    r"\bimport\s*\(\s*[\"'`](?:https?:)?//",
    r"\bimport\b[^;\n]*\bfrom\s*[\"'](?:https?:)?//",
    r"url\(\s*[\"']?\s*(?:https?:)?//",
    r"\.src\s*=\s*[\"'](?:https?:)?//",
    r"Src\s*=\s*[\"'](?:https?:)?//",
)]


def site_offline_problems(site):
    """Every place in a built site that would fetch something from the network: (file, what)."""
    problems = []
    for path in Path(site).rglob("*"):
        if path.suffix in (".html", ".js", ".css") and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            problems += [(str(path.relative_to(site)), m.group(0)[:120]) for p in FETCHED for m in p.finditer(text)]
    return problems


def test_the_offline_check_can_fail(tmp_path):
    (tmp_path / "a.html").write_text('<link rel="stylesheet" href="https://fonts.example/x.css">'
                                     '<script>const m = await import("https://cdn.example/m.mjs");</script>'
                                     '<a href="https://arxiv.org/abs/1706.03762">a paper</a>')
    assert [what[:30] for _, what in site_offline_problems(tmp_path)] == [
        '<link rel="stylesheet" href="h', 'import("https://']


def _need_site_tools():
    """Skip (fail under CI) where mkdocs is missing."""
    if shutil.which("mkdocs") is None and not _has_module("mkdocs"):
        message = "the site's tools are missing: pip install -e '.[docs]'"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def small_site(tmp_path_factory):
    """The home page and lessons 04, 06 and 08, quick, built as CI's quick site is (cache kept apart)."""
    _need_site_tools()
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, TINYATTN_QUICK="1", TINYATTN_SITE_LESSONS="04,06,08", MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _has_module(name):
    return importlib.util.find_spec(name) is not None


@pytest.fixture(scope="module")
def hooks():
    """docs/site_hooks.py, loaded from its path as mkdocs loads it."""
    _need_site_tools()
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "site_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cache_that_is_a_file_stops_the_build_naming_it(hooks, tmp_path, monkeypatch):
    from mkdocs.exceptions import PluginError
    monkeypatch.setenv("TINYATTN_QUICK", "1")
    cache = tmp_path / ".cache"
    cache.write_text("not a folder")
    with pytest.raises(PluginError, match=re.escape(f"{cache} is a file, not a folder")):
        hooks._cache_dir(cache)
    cache.unlink()
    (cache / "lessons-quick-0123456789abcdef").mkdir(parents=True)         # another fingerprint's: it goes
    here = hooks._cache_dir(cache)
    assert here.parent == cache and here.name.startswith("lessons-quick-") and list(cache.iterdir()) == []


def test_site_lessons_that_name_no_lesson_stop_the_build_saying_so(hooks, tmp_path, monkeypatch):
    from mkdocs.exceptions import PluginError
    monkeypatch.setenv("TINYATTN_SITE_LESSONS", "6, 08")
    assert [path.name[:2] for path in hooks.lessons()] == ["06", "08"]
    monkeypatch.setenv("TINYATTN_SITE_LESSONS", "06,99")
    with pytest.raises(PluginError, match="TINYATTN_SITE_LESSONS=06,99: no lesson 99; the lessons are 01, 02, 03"):
        hooks.lessons()
    env = dict(os.environ, TINYATTN_SITE_LESSONS="99")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(tmp_path / "site")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "TINYATTN_SITE_LESSONS=99: no lesson 99" in done.stderr


def test_the_small_site_has_its_pages_and_fetches_nothing(small_site):
    pages = {str(p.relative_to(small_site)) for p in small_site.rglob("index.html")}
    assert {"index.html", "lessons/06_gpt/index.html", "lessons/08_vit/index.html", "exercises/index.html",
            "performance/index.html", "api/nn/index.html"} <= pages
    assert "lessons/05_transformer/index.html" not in pages
    assert site_offline_problems(small_site) == []
    lesson = (small_site / "lessons/06_gpt/index.html").read_text(encoding="utf-8")
    assert "Run it yourself" in lesson and "python -m lessons 06 --step" in lesson
    assert "bits per character" in lesson                                  # a printed result, in the page
    assert "tinyattn-head-view-" in lesson                                  # the explorer, as HTML on a page
    api = (small_site / "api/nn/index.html").read_text(encoding="utf-8")
    assert "kv_cache_bytes_per_token" in api and "register_forward_hook" in api   # the docstrings, file by file
    points = (small_site / "interpret/index.html").read_text(encoding="utf-8")   # the points table, from POINTS
    assert "<td><code>blocks.{l}.attn.hook_attn_scores</code></td>" in points and "the site writes them" not in points


def test_a_quick_page_says_so_above_its_prose_and_the_home_page_says_which_build(small_site, hooks):
    for name in ("04_flash_attention", "06_gpt", "08_vit"):
        page = (small_site / f"lessons/{name}/index.html").read_text(encoding="utf-8")
        banner, first_cell = page.find(html.escape(hooks.QUICK_BANNER, quote=False)), page.find("jp-Cell")
        assert 0 < banner < page.find("Run it yourself") < first_cell, name
    home = (small_site / "index.html").read_text(encoding="utf-8")
    assert "This site was built from the lessons&#39; quick runs" in home or \
        "This site was built from the lessons' quick runs" in home


def test_no_page_names_a_folder_of_the_machine_that_built_it(small_site):
    """The lessons print where tinyattn was imported from, and where files went: on the site, no absolute path."""
    found = [str(path.relative_to(small_site)) for path in small_site.rglob("*.html")
             if str(ROOT) in path.read_text(encoding="utf-8")]
    assert found == []
    page = (small_site / "lessons/06_gpt/index.html").read_text(encoding="utf-8")
    assert "imported from the repository&#39;s tinyattn/" in page or "imported from the repository's tinyattn/" in page


def test_a_stored_run_keeps_its_shared_blocks_once_and_is_marked_stale_when_its_lesson_changed(hooks, tmp_path,
                                                                                                monkeypatch):
    from mkdocs.exceptions import PluginError
    monkeypatch.setattr(hooks, "EXECUTED", tmp_path)
    monkeypatch.setattr(hooks, "SHARED_BLOCKS", tmp_path / "shared_blocks.json")
    theme = "<style>" + "x" * 5000 + "</style>"
    content = theme + "<p>loss 0.5</p><style>small</style>" + theme
    lesson = ROOT / "lessons" / "19_complexity.py"
    record = {"lesson": lesson.name, "lesson_sha256": hooks.file_digest(lesson), "run_on": "2026-11-29",
              "commit": "abc1234", "content": content, "toc_tokens": [], "title": "19"}
    stored = tmp_path / "19_complexity.json"
    hooks._store(stored, record)
    kept = json.loads(stored.read_text(encoding="utf-8"))["content"]
    assert "x" * 5000 not in kept and "<style>small</style>" in kept and kept.count("<!-- shared block") == 2
    assert hooks._blocks_in(kept, stored) == content
    assert "default run (seed 0) of 2026-11-29 at commit abc1234" in hooks.built_from_note("19", "stored", record)
    changed = dict(record, lesson_sha256="0" * 64)
    note = hooks.built_from_note("19", "stored", changed)
    assert "changed since" in note and "python docs/store_lesson_runs.py 19" in note
    (tmp_path / "shared_blocks.json").write_text("{}")
    with pytest.raises(PluginError, match="shared blocks .* that .*shared_blocks.json does not hold"):
        hooks._blocks_in(kept, stored)


def test_a_default_build_without_a_stored_run_says_how_to_store_one(hooks, monkeypatch):
    from mkdocs.exceptions import PluginError
    monkeypatch.delenv("TINYATTN_QUICK", raising=False)
    monkeypatch.delenv("TINYATTN_SITE_STORE", raising=False)
    assert hooks.build_kind() == "default"
    note = hooks.built_from_note("11", "quick", None)
    assert hooks.QUICK_BANNER in note and "python docs/store_lesson_runs.py 11" in note
    monkeypatch.setenv("TINYATTN_QUICK", "1")
    assert hooks.build_kind() == "quick" and "store_lesson_runs" not in hooks.built_from_note("11", "quick", None)
    monkeypatch.setenv("TINYATTN_SITE_STORE", "1")                # quick runs stored as default ones: refused
    with pytest.raises(PluginError, match="unset TINYATTN_QUICK"):
        hooks.on_config(None)


def test_a_lesson_run_on_ranks_counts_as_a_default_run_is_never_stored_and_a_failed_run_leaves_no_page(
        hooks, tmp_path, monkeypatch):
    from mkdocs.exceptions import PluginError
    monkeypatch.delenv("TINYATTN_QUICK", raising=False)
    monkeypatch.delenv("TINYATTN_SITE_STORE", raising=False)
    monkeypatch.setenv("TINYATTN_SITE_LESSONS", ",".join(hooks.ON_RANKS))
    assert "1 of the 1 lesson pages show the lesson's default run" in hooks.which_build()
    refused = subprocess.run([sys.executable, "docs/store_lesson_runs.py", *hooks.ON_RANKS], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "nothing of it is stored" in refused.stderr
    broken = tmp_path / "lessons" / "22_broken.py"                  # every rank raises at once
    broken.parent.mkdir()
    broken.write_text("raise SystemExit(3)\n")
    config = {"mkdocs-jupyter": type("Plugin", (), {"config": {"cache_dir": str(tmp_path / "cache")}})()}
    with pytest.raises(PluginError, match="22_broken.py on 2 ranks failed"):
        hooks._run_on_ranks(broken, type("Config", (), {"plugins": config})())
    assert not list((tmp_path / "cache").rglob("*.ipynb"))


def test_the_default_build_shows_stored_runs_without_running_them(tmp_path):
    """`mkdocs build`, the README's command: a lesson with a run stored in docs/executed/ shows it (quick runs where
    none is stored are the quick build's, tested above)."""
    _need_site_tools()
    stored = sorted((ROOT / "docs" / "executed").glob("[0-9][0-9]_*.json"))
    if not stored:
        pytest.skip("no lesson has a stored run in docs/executed/")
    number = stored[0].name[:2]
    env = {key: value for key, value in os.environ.items() if key != "TINYATTN_QUICK"}
    env.update(TINYATTN_SITE_LESSONS=number, MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "lessons" / stored[0].stem / "index.html").read_text(encoding="utf-8")
    record = json.loads(stored[0].read_text(encoding="utf-8"))
    assert f"default run (seed 0) of {record['run_on']}" in page and "Built from the quick run" not in page
    assert "<!-- shared block" not in page and site_offline_problems(tmp_path) == []
    assert "Which runs this site shows" in (tmp_path / "index.html").read_text(encoding="utf-8")


def test_the_full_quick_site_fetches_nothing():
    """The site .ci/run builds before the tests (site/), where it is there."""
    site = ROOT / "site"
    if not (site / "index.html").exists():
        if os.environ.get("CI"):
            pytest.fail("CI builds the quick site into site/ before the tests (.ci/run), and it is not there")
        pytest.skip("no site/ built (TINYATTN_QUICK=1 mkdocs build)")
    assert site_offline_problems(site) == []


def _nonblank(data_uri):
    from PIL import Image
    image = np.asarray(Image.open(io.BytesIO(base64.b64decode(data_uri.split(",", 1)[1]))).convert("L"))
    return image.size > 0 and image.std() > 1


@pytest.fixture(scope="module")
def served(small_site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(small_site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_lesson_pages_load_offline_show_their_figures_and_their_views_respond(served):
    driver = chromium()
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    try:
        driver.get(f"{served}/lessons/06_gpt/")
        images = [img.get_attribute("src") for img in driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea img")]
        assert images and all(src.startswith("data:image/png") and _nonblank(src) for src in images)
        view = driver.find_element(By.CSS_SELECTOR, "[id^=tinyattn-head-view-]")
        query = view.find_elements(By.CSS_SELECTOR, "text[data-side=query]")[2]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", query)
        ActionChains(driver).move_to_element(query).perform()
        active = view.find_elements(By.CSS_SELECTOR, "line[data-active=true]")
        assert active and {line.get_attribute("data-query") for line in active} == {"2"}
        assert len(active) < len(view.find_elements(By.CSS_SELECTOR, "line"))
        assert console_errors(driver) == []

        driver.get(f"{served}/lessons/08_vit/")
        view = driver.find_element(By.CSS_SELECTOR, "[id^=tinyattn-patch-view-]")
        cells = view.find_elements(By.CSS_SELECTOR, ".cells div")
        before = [cell.get_attribute("data-weight") for cell in cells]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", cells[5])
        ActionChains(driver).move_to_element(cells[5]).perform()
        assert view.find_element(By.CSS_SELECTOR, "span.query").text == "query: patch 5"
        assert [cell.get_attribute("data-weight") for cell in cells] != before
        assert console_errors(driver) == []
        left = [url for url in requested_urls(driver) if not url.startswith((served, "data:", "blob:"))]
        assert left == []
    finally:
        driver.quit()


def test_the_flash_player_is_on_lesson_04s_quick_page_with_buttons_that_look_like_buttons(served):
    driver = chromium()
    from selenium.webdriver.common.by import By
    try:
        driver.get(f"{served}/lessons/04_flash_attention/")
        player = driver.find_element(By.CSS_SELECTOR, "[id^=tinyattn-flash-player-]")
        button = player.find_element(By.CSS_SELECTOR, "button.next")
        style = {name: button.value_of_css_property(name)
                 for name in ("background-color", "border-top-width", "border-top-style", "padding-left")}
        assert style["background-color"] not in ("rgba(0, 0, 0, 0)", "transparent"), style   # the theme's reset undone
        assert style["border-top-style"] == "solid" and float(style["border-top-width"][:-2]) >= 1, style
        assert float(style["padding-left"][:-2]) > 0, style
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
        before = player.get_attribute("data-step")
        button.click()
        assert player.get_attribute("data-step") != before and console_errors(driver) == []
    finally:
        driver.quit()


def test_lesson_code_fits_the_page_column(served):
    """The lessons' code is up to 120 columns: on a 1400-pixel window no code cell scrolls sideways."""
    driver = chromium()
    from selenium.webdriver.common.by import By
    try:
        driver.set_window_size(1400, 1000)
        for name in ("04_flash_attention", "06_gpt"):
            driver.get(f"{served}/lessons/{name}/")
            cells = driver.find_elements(By.CSS_SELECTOR, ".jp-InputArea pre")
            wide = [cell.text[:60] for cell in cells
                    if driver.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth + 1;", cell)]
            assert cells and wide == [], (name, wide)
    finally:
        driver.quit()
