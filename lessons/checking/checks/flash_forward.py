"""Flash attention's forward (lesson 04), graded with the library's backward as a whole (shared.check_flash)."""
from lessons.checking.checks import exercise
from lessons.checking.shared import check_flash


@exercise("04", "flash attention's forward", given=["FlashAttention.backward"], place=2)
def flash_forward(learner):
    check_flash(learner.FlashAttention, "forward")
