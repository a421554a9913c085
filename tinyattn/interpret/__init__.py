"""Looking inside a model, from the outside: record every module's output and every attention's weights in a
forward (recording.py), ablate or patch chosen heads (interventions.py), score what each head does
(head_scores.py), and follow attention through the layers (rollout.py). Built on the modules' forward hooks; the
engine knows nothing of it."""
from .head_scores import duplicate_token_score, induction_score, previous_token_score
from .interventions import ablate_heads, patch_heads
from .lens import Decomposition, apply_final_ln, decompose_residual, direct_logit_attribution, logit_lens
from .patching import patching_sweep
from .points import intervene, point_names, replace_at
from .recording import Recording, record
from .rollout import attention_rollout

__all__ = ["Decomposition", "Recording", "ablate_heads", "apply_final_ln", "decompose_residual",
           "direct_logit_attribution", "logit_lens", "patching_sweep", "attention_rollout", "duplicate_token_score", "induction_score",
           "intervene", "patch_heads", "point_names", "previous_token_score", "record", "replace_at"]
