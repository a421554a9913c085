"""The course site (mkdocs.yml, docs/site_hooks.py): a small quick build (the home page and lessons 06 and 08),
read as files and then served on 127.0.0.1 to headless Chromium. The full quick site is built by .ci/run before the
tests; `site_offline_problems` checks it too when it is there."""
import base64
import functools
import http.server
import importlib.util
import io
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
    """The home page and lessons 06 and 08, quick, built as CI's quick site is (cache kept apart)."""
    _need_site_tools()
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, TINYATTN_QUICK="1", TINYATTN_SITE_LESSONS="06,08", MPLBACKEND="Agg")
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
