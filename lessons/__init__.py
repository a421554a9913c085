"""The lessons: numbered scripts run top to bottom (python lessons/NN_topic.py) or cell by cell
(python -m lessons NN --step). common.py holds what every lesson shares."""
