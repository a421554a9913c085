"""mkdocs hooks that build the course site from the repository as it is, with no copies kept in docs/: the home page
is the README, each lesson page is the lesson's `.py` (rendered and executed by mkdocs-jupyter, which reads the
`# %%` cells with jupytext), the exercises page is lessons/exercises/README.md, and the README's gallery images come
from plots/. A lesson page opens with a box giving the three ways to go through it. A lesson of ON_RANKS is run on
that many ranks instead (lessons/ranks_notebook.py), as a notebook kernel is one process: its page is the executed
notebook that run writes, holding rank 0's outputs.

TINYATTN_SITE_LESSONS=06,08 builds the pages of those lessons only (the browser test's small site)."""
import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
LESSON = re.compile(r"^(\d\d)_\w+\.(py|ipynb)$")
ON_RANKS = {"22": 2}      # lessons whose page comes from a run on this many ranks
sys.path.insert(0, str(ROOT))
from lessons.__main__ import lesson_files  # noqa: E402 (the lessons' own order)


def lessons():
    """The lesson files the site holds, in the order `python -m lessons` lists them. A number in
    TINYATTN_SITE_LESSONS that names no lesson stops the build, naming it (a site without it would look fine)."""
    chosen = os.environ.get("TINYATTN_SITE_LESSONS")
    every = [Path(p) for p in lesson_files()]
    if not chosen:
        return every
    numbers = {n.strip().zfill(2) for n in chosen.split(",")}
    missing = sorted(numbers - {path.name[:2] for path in every})
    if missing:
        raise PluginError(f"TINYATTN_SITE_LESSONS={chosen}: no lesson {', '.join(missing)}; the lessons are "
                          f"{', '.join(path.name[:2] for path in every)}")
    return [path for path in every if path.name[:2] in numbers]


def on_config(config):
    # The lessons run in a Jupyter kernel that inherits this process's environment: with MPLBACKEND=Agg there the
    # kernel would drop every figure instead of showing it inline.
    os.environ.pop("MPLBACKEND", None)
    # The pages are read, not run: views that need no kernel stand in for widgets (tinyattn.viz.display.static_page).
    os.environ["TINYATTN_STATIC_PAGE"] = "1"
    config.plugins["mkdocs-jupyter"].config["cache_dir"] = str(_cache_dir())
    config.nav.insert(1, {"Lessons": [f"lessons/{_page_name(path)}" for path in lessons()]})
    return config


def _cache_dir(cache=ROOT / ".cache"):
    """Where executed lessons are kept, in cache. mkdocs-jupyter's cache key is a lesson file's content; a page also
    depends on the library it ran, and on whether the build is quick. So the folder is named by both (a fingerprint
    of tinyattn/ and of these hooks), and the folders of other fingerprints go: a rebuild after changing one lesson
    re-runs that lesson, after changing the library every lesson."""
    if cache.exists() and not cache.is_dir():
        raise PluginError(f"{cache} is a file, not a folder: the site keeps the lessons it executed there; move the "
                          "file away or delete it")
    digest = hashlib.sha256(os.environ.get("TINYATTN_QUICK", "0").encode())
    for path in sorted([*(ROOT / "tinyattn").rglob("*.py"), *(ROOT / "tinyattn").rglob("*.cu"), Path(__file__)]):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    kind = "quick" if os.environ.get("TINYATTN_QUICK") == "1" else "full"
    here = cache / f"lessons-{kind}-{digest.hexdigest()[:16]}"
    for old in here.parent.glob(f"lessons-{kind}-*"):
        if old != here:
            shutil.rmtree(old, ignore_errors=True)
    return here


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
    # Files of the repository at the same place on the site (not File.generated: mkdocs-jupyter's pages need a
    # file that has a source folder).
    for path in lessons() + sorted((ROOT / "plots").glob("*.png")):
        if path.name[:2] in ON_RANKS and path.suffix == ".py":
            folder = _run_on_ranks(path, config)
            files.append(File(f"lessons/{_page_name(path)}", src_dir=str(folder), dest_dir=config.site_dir,
                              use_directory_urls=config.use_directory_urls))
            continue
        files.append(File(str(path.relative_to(ROOT)), src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files


def _page_name(path):
    """The file a lesson's page is made from: the lesson itself, or the notebook of its run on ranks."""
    return path.stem + ".ipynb" if path.name[:2] in ON_RANKS else path.name


def _run_on_ranks(path, config):
    """Run the lesson on its ranks, writing the executed notebook into a folder of the cache named by the lesson's
    content and its runner's (kept while the library and the hooks are unchanged); returns the folder that holds
    lessons/NAME.ipynb."""
    runner = ROOT / "lessons" / "ranks_notebook.py"
    folder = Path(config.plugins["mkdocs-jupyter"].config["cache_dir"]) / "ranks" / \
        hashlib.sha256(path.read_bytes() + runner.read_bytes()).hexdigest()[:16]
    target = folder / "lessons" / _page_name(path)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        done = subprocess.run([sys.executable, "-m", "tinyattn.distributed.run", "--nproc-per-node",
                               str(ON_RANKS[path.name[:2]]), "-m", "lessons.ranks_notebook", str(path), str(target)],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{path.name} on {ON_RANKS[path.name[:2]]} ranks failed:\n{done.stderr[-3000:]}")
    return folder


def run_it_yourself(number):
    """The box a lesson page opens with: its three commands, as the README gives them."""
    commands = [("run it", f"python -m lessons {number}    # --quick for a tiny run in seconds")]
    if number in ON_RANKS:
        commands.append((f"run it on {ON_RANKS[number]} ranks", f"python -m tinyattn.distributed.run --nproc-per-node "
                                                                f"{ON_RANKS[number]} -m lessons {number}"))
    commands += [("step through it", f"python -m lessons {number} --step"),
                 ("open it as a notebook", f"python -m lessons {number} --notebook --out notebooks")]
    rows = "".join(f"<li>{what}: <code>{html.escape(command)}</code></li>" for what, command in commands)
    return (f'<div class="admonition tip run-it-yourself"><p class="admonition-title">Run it yourself</p>'
            f"<p>From the repository root, after <code>pip install -e \".[lessons]\"</code>:</p><ul>{rows}</ul>"
            f"<p>Below: the lesson with its output from one run{_ranks_said(number)}, as you would see it.</p></div>")


def _ranks_said(number):
    return f" on {ON_RANKS[number]} ranks (rank 0's)" if number in ON_RANKS else ""


# What mkdocs-jupyter's page template would fetch from the network: a module script importing mermaid from a CDN
# (the lessons draw no diagrams) and a MathJax loader with an empty address (the lessons write no TeX).
MERMAID_LOADER = re.compile(r'<script type="module">(?:(?!</script>).)*?import\("https?://(?:(?!</script>).)*</script>',
                            re.DOTALL)
MATHJAX_LOADER = re.compile(r'<!-- Load mathjax -->\s*<script src=""> </script>')


def on_post_page(output, page, config):
    return MATHJAX_LOADER.sub("", MERMAID_LOADER.sub("", output))


def on_page_content(content, page, config, files):
    match = LESSON.match(os.path.basename(page.file.src_uri))
    if page.file.src_uri.startswith("lessons/") and match:
        return run_it_yourself(match.group(1)) + content
    return content
