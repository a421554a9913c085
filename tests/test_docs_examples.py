"""Every ```python block of the README, of docs/ and of the exercises' guide runs as printed: a file's blocks in
order, in one session, as a reader pasting them would. A block preceded by a line `<!-- not run: why -->` is skipped
by that mark (it needs the network, or is a fragment); bash blocks are the set-up commands, which .ci/run runs."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "lessons" / "exercises" / "README.md"]
BLOCK = re.compile(r"^(?:<!-- not run: (?P<why>.+?) -->\n)?```python\n(?P<code>.*?)^```", re.S | re.M)


def python_blocks(text):
    """[(line, code, why not run or None)] of a Markdown text's python blocks."""
    return [(text.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("why")) for m in BLOCK.finditer(text)]


def test_blocks_and_their_marks_are_found():
    text = "a\n```python\nx = 1\n```\n<!-- not run: needs the hub -->\n```python\ny = 2\n```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n", None), (7, "y = 2\n", "needs the hub")]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs_as_printed(document, tmp_path):
    blocks = [(line, code) for line, code, why in python_blocks(document.read_text(encoding="utf-8")) if why is None]
    if not blocks:
        pytest.skip(f"{document.relative_to(ROOT)} has no python block to run")
    session = "".join(f"print('--- block at line {line}', flush=True)\n"
                      f"exec(compile({code!r}, '{document.name}:{line}', 'exec'))\n" for line, code in blocks)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, "-c", session], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{document.name}: a block failed\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
