"""The lessons: numbered scripts run top to bottom (python lessons/NN_topic.py), cell by cell (python -m lessons NN
--step) or as notebooks (python -m lessons NN --notebook). What every lesson shares is tinyattn/lesson.py."""
