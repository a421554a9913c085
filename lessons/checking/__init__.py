"""The exercises' grader in parts; `lessons/checker.py` is its command face (`python -m lessons check ...`).

- protocol.py: what parent and child say to each other, as JSON and raw array bytes (nothing that can carry code).
- runner.py: the parent's side: one child process per submission, its time limit, its output, why it stopped; the
  learner's names as stand-ins whose calls run in the child.
- child.py: the child's side: loads the private copy of one file under an audit hook, runs what the parent asks.
- learners_file.py: finding and loading the learner's file, and refusing borrowed code by how it reads.
"""
