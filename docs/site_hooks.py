"""mkdocs hooks that build the course site from the repository as it is, with no copies kept in docs/: the home page
is the README, each lesson page is the lesson's `.py` (rendered and executed by mkdocs-jupyter, which reads the
`# %%` cells with jupytext), the exercises page is lessons/exercises/README.md, and the README's gallery images come
from plots/. A lesson page opens with a box giving the three ways to go through it. A lesson of ON_RANKS is run on
that many ranks instead (lessons/ranks_notebook.py), as a notebook kernel is one process: its page is the executed
notebook that run writes, holding rank 0's outputs. The table of activation points in interpret.md is made from
tinyattn.interpret.POINTS.

What a lesson page shows depends on the build's kind (build_kind):
- "default" (`mkdocs build`): the lesson's default run as stored in docs/executed/ (a minute for the whole site, as
  nothing trains), marked stale when the lesson's file changed since; a lesson with no stored run runs its quick run,
  under a banner that says so.
- "quick" (`TINYATTN_QUICK=1 mkdocs build`, CI's): every lesson's quick run, each page under that banner.
- "store" (`python docs/store_lesson_runs.py NN`): the lessons named run their default configuration, and their
  pages are stored in docs/executed/.
The home page says which kind of build it is. TINYATTN_SITE_LESSONS=06,08 builds the pages of those lessons only (the
browser test's small site)."""
import datetime
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from mkdocs.structure.toc import get_toc

ROOT = Path(__file__).resolve().parent.parent
EXECUTED = ROOT / "docs" / "executed"        # a lesson's stored default run: NN_name.json
LESSON = re.compile(r"^(\d\d)_\w+\.(py|ipynb)$")
ON_RANKS = {"22": 2}      # lessons whose page comes from a run on this many ranks, made by each build
RANKS_TIMEOUT = 1200      # seconds for such a run (its default run takes under a minute on 2 cores)
sys.path.insert(0, str(ROOT))
from lessons.__main__ import lesson_files  # noqa: E402 (the lessons' own order)
from tinyattn.interpret import POINTS  # noqa: E402

QUICK_BANNER = "Built from the quick run: the numbers below are too small to learn and may contradict the text."
STORE_COMMAND = "python docs/store_lesson_runs.py {number}"


def build_kind():
    """"quick", "store" or "default" (the module's docstring says what each shows)."""
    if os.environ.get("TINYATTN_SITE_STORE") == "1":
        return "store"
    return "quick" if os.environ.get("TINYATTN_QUICK") == "1" else "default"


def stored_run_path(lesson):
    """Where lesson's (a lessons/NN_name.py path) stored default run lives."""
    return EXECUTED / f"{Path(lesson).stem}.json"


def file_digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# mkdocs-jupyter puts the same large <style> and <script> blocks (its theme: about 600 kB) into every page. A stored
# page keeps a marker in place of each block of 4 kB or more, and the blocks are stored once, in SHARED_BLOCKS, by
# their digest.
SHARED_BLOCKS = EXECUTED / "shared_blocks.json"
BLOCK = re.compile(r"<(style|script)\b[^>]*>.*?</\1>", re.DOTALL)
MARKER = re.compile(r"<!-- shared block (\w+) -->")


def _blocks_out(content, blocks):
    """content with each block of 4 kB or more replaced by its marker, the block added to blocks."""
    def out(match):
        block = match.group(0)
        if len(block) < 4096:
            return block
        key = hashlib.sha256(block.encode()).hexdigest()[:16]
        blocks[key] = block
        return f"<!-- shared block {key} -->"
    return BLOCK.sub(out, content)


def _blocks_in(content, stored):
    """A stored page's content with its shared blocks put back."""
    blocks = json.loads(SHARED_BLOCKS.read_text(encoding="utf-8")) if SHARED_BLOCKS.exists() else {}
    missing = sorted(set(MARKER.findall(content)) - set(blocks))
    if missing:
        raise PluginError(f"{stored} names shared blocks {', '.join(missing)} that {SHARED_BLOCKS} does not hold: "
                          f"store the lesson again ({STORE_COMMAND.format(number=Path(stored).name[:2])})")
    return MARKER.sub(lambda match: blocks[match.group(1)], content)


def _store(stored, record):
    """Write a lesson's stored run, its shared blocks into SHARED_BLOCKS, which keeps the blocks some page uses."""
    EXECUTED.mkdir(exist_ok=True)
    blocks = json.loads(SHARED_BLOCKS.read_text(encoding="utf-8")) if SHARED_BLOCKS.exists() else {}
    record = dict(record, content=_blocks_out(record["content"], blocks))
    stored.write_text(json.dumps(record, indent=0) + "\n", encoding="utf-8")
    used = set()
    for path in EXECUTED.glob("[0-9][0-9]_*.json"):
        used |= set(MARKER.findall(path.read_text(encoding="utf-8")))
    SHARED_BLOCKS.write_text(json.dumps({key: blocks[key] for key in sorted(used)}, indent=0) + "\n",
                             encoding="utf-8")


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
    if build_kind() == "store" and os.environ.get("TINYATTN_QUICK") == "1":
        raise PluginError("TINYATTN_SITE_STORE=1 stores default runs, and TINYATTN_QUICK=1 would make them quick "
                          "ones: unset TINYATTN_QUICK (python docs/store_lesson_runs.py NN does)")
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
    depends on the library it ran, and on whether it ran quick (a default build runs quick runs only, where no run is
    stored). So the folder is named by both (a fingerprint of tinyattn/ and of these hooks), and the folders of other
    fingerprints go: a rebuild after changing one lesson re-runs that lesson, after changing the library every
    lesson."""
    if cache.exists() and not cache.is_dir():
        raise PluginError(f"{cache} is a file, not a folder: the site keeps the lessons it executed there; move the "
                          "file away or delete it")
    kind = "full" if build_kind() == "store" else "quick"
    digest = hashlib.sha256(kind.encode())
    for path in sorted([*(ROOT / "tinyattn").rglob("*.py"), *(ROOT / "tinyattn").rglob("*.cu"), Path(__file__)]):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    here = cache / f"lessons-{kind}-{digest.hexdigest()[:16]}"
    for old in here.parent.glob(f"lessons-{kind}-*"):
        if old != here or kind == "full":      # a store always runs its lessons: the day and commit it stamps are true
            shutil.rmtree(old, ignore_errors=True)
    return here


def _readme_as_home():
    """The README, its links pointed at the site's pages instead of the repository's files, under a note that says
    which build this is."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/", "](", text)
    text = re.sub(r"\]\(lessons/exercises/README\.md", "](exercises.md", text)
    title, rest = text.split("\n", 1)
    return f"{title}\n\n{which_build()}\n{rest}"


def which_build():
    """The home page's note: which kind of build this site is, and how many lesson pages show a default run."""
    every = lessons()
    if build_kind() == "quick":
        return ('!!! warning "This site was built from the lessons\' quick runs"\n'
                "    `TINYATTN_QUICK=1 mkdocs build`, what CI builds: every lesson page shows a run too small to "
                "learn, whose numbers may contradict the text. `mkdocs build` shows the default runs stored in the "
                "repository.\n")
    stored = [path for path in every if stored_run_path(path).exists() or path.name[:2] in ON_RANKS] \
        if build_kind() == "default" else every
    quick = [path.name[:2] for path in every if path not in stored]
    return ('!!! note "Which runs this site shows"\n'
            f"    {len(stored)} of the {len(every)} lesson pages show the lesson's default run, as stored in the "
            "repository (`docs/executed/`; each page says when it was run and whether the lesson changed since) or, "
            "for a lesson run on several processes, as this build ran it"
            + (f"; the pages of lessons {', '.join(quick)} show their quick runs, too small to learn, and say so at "
               "their top (no default run of theirs is stored yet)" if quick else "") + ".\n")


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
    """Run the lesson on its ranks (its quick run in a quick build, else its default one), writing the executed
    notebook into a folder of the cache named by the lesson's content, its runner's and the run's kind (kept while the
    library and the hooks are unchanged); returns the folder that holds lessons/NAME.ipynb."""
    runner = ROOT / "lessons" / "ranks_notebook.py"
    kind = ("quick" if os.environ.get("TINYATTN_QUICK") == "1" else "default").encode()   # the run the kernel makes
    folder = Path(config.plugins["mkdocs-jupyter"].config["cache_dir"]) / "ranks" / \
        hashlib.sha256(path.read_bytes() + runner.read_bytes() + kind).hexdigest()[:16]
    target = folder / "lessons" / _page_name(path)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed once every rank ended well: a failed run leaves nothing a later build would show.
        partial = target.with_name(target.stem + ".partial.ipynb")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        ranks = ON_RANKS[path.name[:2]]
        try:
            done = subprocess.run([sys.executable, "-m", "tinyattn.distributed.run", "--nproc-per-node", str(ranks),
                                   "-m", "lessons.ranks_notebook", str(path), str(partial)],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=RANKS_TIMEOUT)
        except subprocess.TimeoutExpired:
            partial.unlink(missing_ok=True)
            raise PluginError(f"{path.name} on {ranks} ranks ran past {RANKS_TIMEOUT} s: stopped") from None
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise PluginError(f"{path.name} on {ranks} ranks failed:\n{done.stderr[-3000:]}")
        partial.replace(target)
    return folder


POINTS_ROWS = "| (a row for each point of `tinyattn.interpret.POINTS`: the site writes them here) | | |"


def points_beside_transformer_lens(markdown):
    """interpret.md with its marker row replaced by a row for each point of POINTS: its name, its shape and what
    flows there, and what TransformerLens has at that name. The table is written once, as data."""
    if POINTS_ROWS not in markdown:
        raise PluginError(f"interpret.md has lost the row the points table goes in: {POINTS_ROWS}")
    rows = [f"| `{name}` | {shape}: {what} | {theirs} |" for name, shape, what, theirs in POINTS]
    return markdown.replace(POINTS_ROWS, "\n".join(rows))


def on_page_markdown(markdown, page, config, files):
    return points_beside_transformer_lens(markdown) if page.file.src_uri == "interpret.md" else markdown


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


def _lesson_number(page):
    match = LESSON.match(os.path.basename(page.file.src_uri))
    return match.group(1) if page.file.src_uri.startswith("lessons/") and match else None


# What each lesson page of this build was made from, by its source path: ("quick", None) or ("stored", the stored
# run's record without its page).
BUILT_FROM = {}


@event_priority(-100)           # after mkdocs-jupyter's on_pre_page, which gives the page its render()
def on_pre_page(page, config, files):
    if _lesson_number(page) is None:
        return page
    if page.file.src_uri.endswith(".ipynb"):       # a lesson run on ranks: its page is the notebook on_files made
        BUILT_FROM[page.file.src_uri] = ("ranks", None)
        return page
    lesson, run_lesson = ROOT / page.file.src_uri, page.render
    stored = stored_run_path(lesson)

    def render(config, files):
        kind = build_kind()
        if kind == "default" and stored.exists():
            record = json.loads(stored.read_text(encoding="utf-8"))
            page.content, page.toc = _blocks_in(record["content"], stored), get_toc(record["toc_tokens"])
            page.title = record["title"]
        elif kind == "store":
            run_lesson(config, files)
            record = {"lesson": lesson.name, "lesson_sha256": file_digest(lesson),
                      "run_on": datetime.date.today().isoformat(), "commit": _commit(),
                      "content": page.content, "toc_tokens": _toc_tokens(page.toc), "title": page.title}
            _store(stored, record)
        else:                   # a quick run: this build's kind, or no default run stored
            quick, os.environ["TINYATTN_QUICK"] = os.environ.get("TINYATTN_QUICK"), "1"   # the kernel inherits it
            try:
                run_lesson(config, files)
            finally:
                os.environ.pop("TINYATTN_QUICK") if quick is None else os.environ.update(TINYATTN_QUICK=quick)
            BUILT_FROM[page.file.src_uri] = ("quick", None)
            return
        BUILT_FROM[page.file.src_uri] = ("stored", {k: v for k, v in record.items() if k != "content"})
    page.render = render
    return page


def _commit():
    """The repository's commit, short, with "+changes" when the code a lesson runs (lessons/, tinyattn/) differs
    from it; None outside a git clone."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "lessons", "tinyattn"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if changed else "")


def _toc_tokens(toc):
    """mkdocs' table of contents back as the tokens get_toc reads (what mkdocs-jupyter caches)."""
    return [{"level": item.level, "id": item.id, "name": item.title, "children": _toc_tokens(item.children)}
            for item in toc]


def built_from_note(number, made, record):
    """The box a lesson page opens with, above everything: what the output below comes from."""
    command = STORE_COMMAND.format(number=number)
    if made == "ranks" and build_kind() != "quick":
        return (f'<div class="admonition note built-from"><p class="admonition-title">The lesson\'s default run on '
                f"{ON_RANKS[number]} ranks</p><p>The output below is rank 0's, from the run this build made (a run on "
                "ranks is not stored: it takes about half a minute).</p></div>")
    if made in ("quick", "ranks"):
        why = (f" No default run of this lesson is stored yet (<code>{command}</code> stores one)."
               if build_kind() == "default" else "")
        return (f'<div class="admonition warning built-from"><p class="admonition-title">{QUICK_BANNER}</p>'
                f"<p>The lesson's own numbers come from its default run: <code>python -m lessons {number}</code>."
                f"{why}</p></div>")
    where = f" at commit {html.escape(record['commit'])}" if record.get("commit") else ""
    if record["lesson_sha256"] != file_digest(ROOT / "lessons" / record["lesson"]):
        return (f'<div class="admonition warning built-from stale"><p class="admonition-title">The lesson has '
                f"changed since the run shown here</p><p>The output below is its default run of {record['run_on']}"
                f"{where}; the lesson's file has changed since, so the output may not match the code above it. "
                f"<code>{command}</code> runs it again.</p></div>")
    return (f'<div class="admonition note built-from"><p class="admonition-title">The lesson\'s default run</p>'
            f"<p>The output below is from its default run (seed 0) of {record['run_on']}{where}, stored in the "
            "repository; the lesson has not changed since (changes to the library do not mark it: nearly every "
            "change would).</p></div>")


def on_page_content(content, page, config, files):
    number = _lesson_number(page)
    if number is None:
        return content
    made, record = BUILT_FROM[page.file.src_uri]
    return built_from_note(number, made, record) + run_it_yourself(number) + content
