"""python -m lessons flash: Enter walks flash attention's traced loop tile by tile, in a terminal or from a pipe."""
import os
import pty
import re
import select
import subprocess
import sys
import time

import numpy as np
import pytest

from lessons.flash_walk import describe, meter
from test_lessons_command_line import INTERRUPTED, interrupt
from tinyattn.functional import trace_flash_attention

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = b"Enter: next tile, q: quit > "


def environment():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def trace():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 64, 8)) for _ in range(3))
    return trace_flash_attention(q, k, v, is_causal=True, block_size=16).records


def read_until_prompt(fd, seen=b"", timeout=60):
    end = time.monotonic() + timeout
    while seen.count(PROMPT) == 0:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            raise AssertionError(f"no prompt within {timeout} s; got {seen[-400:]!r}")
        seen += os.read(fd, 65536)
    return seen.decode()


def m_column(text):
    """The m column of each row printed in one tile's table."""
    return {int(parts[0]): float(parts[2]) for parts in (line.split() for line in text.splitlines())
            if len(parts) == 6 and parts[0].isdigit()}


def test_enter_in_a_terminal_advances_one_tile_and_m_changes_as_the_trace_says():
    records = trace()
    controller, terminal = pty.openpty()
    walker = subprocess.Popen([sys.executable, "-m", "lessons", "flash"], cwd=ROOT, env=environment(),
                              stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True)
    os.close(terminal)
    try:
        first = read_until_prompt(controller)
        assert "forward tile 1 of 10 (query rows 0-15, keys 0-15)" in first
        assert "forward tile 2" not in first
        shown = [m_column(first)]
        for tile in (2, 3):
            os.write(controller, b"\n")
            text = read_until_prompt(controller).split("\n", 1)[1]          # past the echoed Enter
            assert f"forward tile {tile} of 10" in text and f"forward tile {tile + 1} " not in text
            shown.append(m_column(text))
        for record, m in zip(records[:3], shown):
            rows = range(*record["rows"])
            assert sorted(m) == list(rows)
            np.testing.assert_allclose([m[r] for r in rows], record["m"][0, 0, :, 0], atol=5e-5)
        # Tiles 2 and 3 share rows 16-31: the second moves some rows' max up, as the trace says, and no row's down.
        assert any(shown[2][r] > shown[1][r] for r in range(16, 32))
        assert all(shown[2][r] >= shown[1][r] for r in range(16, 32))
        os.write(controller, b"q\n")
        assert walker.wait(timeout=60) == 0
    finally:
        if walker.poll() is None:
            walker.kill()
        os.close(controller)


def test_piped_input_runs_to_the_end():
    done = subprocess.run([sys.executable, "-m", "lessons", "flash", "--n", "40", "--full"], cwd=ROOT,
                          env=environment(), input="\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    tiles = re.findall(r"^(forward|backward) tile (\d+) of (\d+)", done.stdout, flags=re.M)
    assert tiles[0] == ("forward", "1", "9") and tiles[-1] == ("backward", "9", "9") and len(tiles) == 18
    assert "the loop holds [" in done.stdout and "of 12,800 bytes" in done.stdout
    # What the forward left is said after its last tile, with the backward's columns and order, before backward's
    # first tile; the last line counts the tiles shown.
    between = done.stdout.index("forward done: every row's m + log l is its log-sum-exp L")
    assert done.stdout.index("forward tile 9 of 9") < between < done.stdout.index("backward tile 1 of 9")
    assert done.stdout.count("forward done:") == 1 and "'sum of P here' is" in done.stdout
    assert "key block by key" in done.stdout[between:done.stdout.index("backward tile 1 of 9")]
    assert done.stdout.rstrip().splitlines()[-1] == "done: 18 of the 18 tiles shown"


def test_a_backward_tile_shows_p_and_dq_and_bad_sizes_are_refused():
    records = trace()
    lines = describe(records[-1])
    assert lines[0] == "backward tile 10 of 10 (query rows 48-63, keys 48-63)"
    first_row = lines[3].split()
    assert int(first_row[0]) == 48
    assert float(first_row[1]) == pytest.approx(records[-1]["p"][0, 0, 0].sum(), abs=5e-5)
    bad = subprocess.run([sys.executable, "-m", "lessons", "flash", "--n", "0"], cwd=ROOT, env=environment(),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--n, --block and --dim must be positive" in bad.stderr


def test_a_row_blocks_first_tile_says_why_its_rescale_is_0():
    """Causal blocks of 16 over 64 rows: forward tiles 1, 2, 4 and 7 are the first of their row blocks, where m
    before is -inf and the rescale exp(-inf - m) is 0; no other tile says so, and the meter stays its width."""
    records = trace()
    firsts = [r["tile"] + 1 for r in records if r["pass"] == "forward" and any("no earlier max" in line
                                                                              for line in describe(r))]
    assert firsts == [1, 2, 4, 7]
    for tile in firsts:
        assert (records[tile - 1]["alpha"] == 0).all()
    assert meter(5, 4) == f"[{'#' * 30}] 5 of 4 bytes (125.0%)"


def test_with_stdin_closed_the_walk_runs_to_the_end():
    done = subprocess.run(["sh", "-c", 'exec "$0" -m lessons flash --n 32 <&-', sys.executable], cwd=ROOT,
                          env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "backward tile 3 of 3" in done.stdout and done.stdout.rstrip().splitlines()[-1].startswith("done:")


def test_ctrl_c_at_the_prompt_prints_one_line_and_exits_130():
    walker = subprocess.Popen([sys.executable, "-m", "lessons", "flash"], cwd=ROOT, env=environment(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert "forward tile 1 of 10" in read_until_prompt(walker.stdout.fileno())
        _, err = interrupt(walker)
    finally:
        if walker.poll() is None:
            walker.kill()
    assert walker.returncode == 130 and err.decode().strip() == INTERRUPTED
