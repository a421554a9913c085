"""Worked answers to the exercises, one file each beside its stub's name: what a learner should end with.
`python -m lessons check NAME --solution` grades them."""
