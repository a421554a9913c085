"""Run lessons in their default configuration and store their executed pages in docs/executed/, which `mkdocs build`
shows instead of running anything:

    python docs/store_lesson_runs.py 06 08        # those lessons (minutes each: the README's lesson table)
    python docs/store_lesson_runs.py all          # every lesson (about 25 minutes on 2 cores)

It builds the site of those lessons only, with TINYATTN_SITE_STORE=1 (docs/site_hooks.py), into a temporary folder
that it removes. A stored page records the lesson file's SHA-256, the day and the commit it ran at: the site marks
the page stale once the lesson's file differs."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
from site_hooks import ON_RANKS  # noqa: E402 (the hooks' own list)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    on_ranks = sorted(n.zfill(2) for n in argv if n.zfill(2) in ON_RANKS)
    if on_ranks:
        print(f"lesson {', '.join(on_ranks)}: its page comes from a run on several processes that each build makes; "
              "nothing of it is stored", file=sys.stderr)
        return 2
    env = {key: value for key, value in os.environ.items() if key != "TINYATTN_QUICK"}
    env["TINYATTN_SITE_STORE"] = "1"
    if argv != ["all"]:
        env["TINYATTN_SITE_LESSONS"] = ",".join(argv)
    with tempfile.TemporaryDirectory() as site:
        return subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", site], cwd=ROOT,
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
