"""Flash attention's backward (lesson 04), graded with the library's forward as a whole (shared.check_flash)."""
from lessons.checking.checks import exercise
from lessons.checking.shared import check_flash


@exercise("04", "flash attention's backward", given=["FlashAttention.forward"], place=3)
def flash_backward(learner):
    check_flash(learner.FlashAttention, "backward")
