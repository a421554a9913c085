"""mkdocs hooks that build the course site from the repository as it is, with no copies kept in docs/: the home page
is the README, each lesson page is the lesson's `.py` (rendered and executed by mkdocs-jupyter, which reads the
`# %%` cells with jupytext), the exercises page is lessons/exercises/README.md, and the README's gallery images come
from plots/. A lesson page opens with a box giving the three ways to go through it."""
import html
import os
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
LESSON = re.compile(r"^(\d\d)_\w+\.py$")


def on_config(config):
    # The lessons run in a Jupyter kernel that inherits this process's environment: with MPLBACKEND=Agg there the
    # kernel would drop every figure instead of showing it inline.
    os.environ.pop("MPLBACKEND", None)
    # A quick build (TINYATTN_QUICK=1) keeps its executed lessons apart from the full build's: the cache key is the
    # file's content, which is the same for both.
    if os.environ.get("TINYATTN_QUICK") == "1":
        jupyter = config.plugins["mkdocs-jupyter"].config
        jupyter["cache_dir"] = jupyter["cache_dir"].rstrip("/") + "-quick"
    return config


def _readme_as_home():
    """The README, its links pointed at the site's pages instead of the repository's files."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/", "](", text)
    return re.sub(r"\]\(lessons/exercises/README\.md", "](exercises.md", text)


def _exercises_page():
    """The exercises' guide; its links to the exercise files point at the repository's copies."""
    return (ROOT / "lessons" / "exercises" / "README.md").read_text(encoding="utf-8")


@event_priority(100)            # before mkdocs-jupyter's on_files, which turns the lessons into notebook pages
def on_files(files, config):
    files.append(File.generated(config, "index.md", content=_readme_as_home()))
    files.append(File.generated(config, "exercises.md", content=_exercises_page()))
    for path in sorted((ROOT / "lessons").iterdir()):
        if LESSON.match(path.name):
            files.append(File.generated(config, f"lessons/{path.name}", abs_src_path=str(path)))
    for path in sorted((ROOT / "plots").glob("*.png")):
        files.append(File.generated(config, f"plots/{path.name}", abs_src_path=str(path)))
    return files


def run_it_yourself(number):
    """The box a lesson page opens with: its three commands, as the README gives them."""
    commands = [("run it", f"python -m lessons {number}    # --quick for a tiny run in seconds"),
                ("step through it", f"python -m lessons {number} --step"),
                ("open it as a notebook", f"python -m lessons {number} --notebook --out notebooks")]
    rows = "".join(f"<li>{what}: <code>{html.escape(command)}</code></li>" for what, command in commands)
    return (f'<div class="admonition tip run-it-yourself"><p class="admonition-title">Run it yourself</p>'
            f"<p>From the repository root, after <code>pip install -e \".[lessons]\"</code>:</p><ul>{rows}</ul>"
            "<p>Below: the lesson with its output from one run, as you would see it.</p></div>")


def on_page_content(content, page, config, files):
    match = LESSON.match(os.path.basename(page.file.src_uri))
    if page.file.src_uri.startswith("lessons/") and match:
        return run_it_yourself(match.group(1)) + content
    return content
