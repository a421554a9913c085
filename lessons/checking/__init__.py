"""The exercises' grader in parts; `lessons/checker.py` is its command face (`python -m lessons check ...`).

- registry.py: the exercises, found by listing checks/: each with its check function, lesson, title, the methods it
  hands over and the library's versions of its answer.
- steps.py: running a check's steps and explaining what failed.
- learners_file.py: finding and loading the learner's file, and refusing borrowed code by how it reads (what the
  lessons import to run on the learner's own Function).
- submission.py: the learner's names as a check reads them.
- comparison.py: comparisons with the reference path and diagnoses (which gradient is wrong, which mistake).
- training.py: training a small model with the learner's Functions like the reference path.
- checks/: each exercise's check, in a file named as the exercise.
- shared.py: what several checks share: the inputs they draw, the steps of exercises graded alike.
- runner.py: the parent's side of a submission run apart: one child process per submission, its time limit, its
  output, why it stopped; the learner's names as stand-ins whose calls run in the child.
- sandbox.py: the operating system's sandbox around each child (bubblewrap on Linux), and whether it runs here.
- child.py: the child's side: loads the private copy of one file under an audit hook (a second line), computes
  what it is asked.
- protocol.py: what parent and child say to each other, as JSON and raw array bytes (nothing that can carry code).
"""
