"""Exercises: one file per exercise, each a statement, the shapes, the math to derive and TODOs to fill in;
solutions/ holds the worked answers (for instructors), given.py the code the exercises hand you.
`python -m lessons exercises` lists them; `python -m lessons check NAME` grades one (lessons/checker.py)."""
