"""The operating system's sandbox around each submission's child: bubblewrap (bwrap) on Linux. Inside it the child
sees Python, its packages and the library read-only; of lessons/, only the child's own modules and what an
exercise may import (exercises/given.py), never solutions/ or the checks; a scratch folder of its own in memory
that holds the submission; no network; its own PID namespace and session (the grader, the other children and any
process outside are out of its sight and reach); an environment with only what Python and tinyattn need; and it
dies with the grader. Where bwrap cannot run, the child runs as a plain process (runner.py) and the audit hook
(child.py) is the only wall."""
import functools
import os
import pathlib
import shutil
import subprocess
import sys

import tinyattn as ta
from lessons.checking import child
from lessons.checking.learners_file import LESSONS

# What the child imports of lessons/ (tests/test_exercises.py holds this to what it imports)
CHILD_FILES = ("__init__.py", "checking/__init__.py", "checking/child.py", "checking/protocol.py",
               "checking/learners_file.py", "notebook.py", "flash_trace_compare.py", "exercises/__init__.py",
               "exercises/given.py")
SCRATCH = 64 << 20               # bytes of the child's scratch folder (in memory): the submission, what it writes
HOW_TO_GET = "install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


def unavailable():
    """Why submissions cannot run in the sandbox here, or None when they can: $TINYATTN_GRADER_SANDBOX=none (to
    grade as without it), not Linux, no bwrap, or bwrap failing (a kernel without user namespaces)."""
    if os.environ.get("TINYATTN_GRADER_SANDBOX") == "none":
        return "TINYATTN_GRADER_SANDBOX=none"
    return _probe()


@functools.lru_cache(maxsize=None)
def _probe():
    if not sys.platform.startswith("linux"):
        return f"bubblewrap runs on Linux only, not on {sys.platform}"
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    scratch = "/tinyattn-probe"
    try:
        done = subprocess.run(_walls(scratch) + ["--", sys.executable, "-c", ""], capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL, env=child.cleared_environment(os.environ, scratch))
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap did not run: {error}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bwrap fails here: {said[-1] if said else f'exit status {done.returncode}'}"
    return None


def not_isolated(why):
    """The line said where submissions run without the sandbox."""
    return (f"note: the submissions are not isolated from the disk ({why}): each runs in a process of its own "
            f"under an audit hook only, which does not stop every route (lessons/exercises/README.md); "
            f"to grade in the sandbox, {HOW_TO_GET}")


def font_lists():
    """matplotlib's lists of the fonts found here, when this process has imported matplotlib (the grader has: its
    command face prints figures' folders): the child's code may import it too (an exercise notebook's first cell
    does), and matplotlib without its list builds one by running fc-list, a process the audit hook refuses. The
    child finds them in its scratch folder's FIGURES."""
    matplotlib = sys.modules.get("matplotlib")
    return sorted(pathlib.Path(matplotlib.get_cachedir()).glob("fontlist-*.json")) if matplotlib else []


def command(scratch, device):
    """The command line that runs the child in the sandbox, its scratch folder (a path outside, shown at the same
    path inside) empty; device: the device it computes on ("cuda": the GPU's device files go in). The child talks
    over the file descriptor it is given and prints to its standard output and error."""
    devices = [] if device == "cpu" else [a for path in sorted(pathlib.Path("/dev").glob("nvidia*"))
                                          for a in ("--dev-bind", str(path), str(path))]
    fonts = [a for path in font_lists() for a in ("--ro-bind", str(path), f"{scratch}/{child.FIGURES}/{path.name}")]
    # Then the root and /dev read-only: only the scratch folder, whose size is capped, takes what the child writes
    # (a tmpfs anywhere else would fill the machine's memory unbounded).
    return _walls(scratch) + fonts + devices + ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", scratch,
                                                "--", sys.executable, "-m", "lessons.checking.child"]


def _walls(scratch):
    """bwrap's arguments: namespaces of its own, a read-only system and Python, the library, the child's files."""
    walls = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev"]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        path = pathlib.Path(top)
        if path.is_symlink():                          # merged /usr: /bin -> usr/bin
            walls += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            walls += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        walls += ["--ro-bind-try", path, path]
    library = pathlib.Path(ta.__file__).resolve().parent
    shown = {pathlib.Path(p).resolve() for p in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix)}
    shown |= {library} | {LESSONS / name for name in CHILD_FILES}
    for path in sorted(shown):
        if not any(path.is_relative_to(other) for other in shown if other != path) and \
                not path.is_relative_to("/usr"):
            walls += ["--ro-bind", str(path), str(path)]
    return walls + ["--size", str(SCRATCH), "--tmpfs", scratch]
