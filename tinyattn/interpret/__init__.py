"""Looking inside a model, from the outside: record every module's output, every attention's weights and any
activation point in a forward (recording.py, points.py), intervene at any point (points.py), ablate or patch chosen
heads (interventions.py), sweep patching over layers and heads or positions (patching.py), read the residual stream
(lens.py: logit lens, decomposition, direct logit attribution), read circuits from the weights (circuits.py), score
what each head does (head_scores.py), and follow attention through the layers (rollout.py). Built on the modules'
forward hooks; the engine knows nothing of it."""
from .circuits import (FactoredMatrix, composition_score, composition_scores, copying_score, head_weights,
                       ov_circuit, qk_circuit)
from .head_scores import duplicate_token_score, induction_score, previous_token_score
from .interventions import ablate_heads, patch_heads
from .lens import Decomposition, apply_final_ln, decompose_residual, direct_logit_attribution, logit_lens
from .patching import patching_sweep
from .points import POINTS, intervene, point_names, replace_at
from .recording import Recording, record
from .rollout import attention_rollout

__all__ = ["POINTS", "Decomposition", "FactoredMatrix", "Recording", "ablate_heads", "apply_final_ln", "attention_rollout",
           "composition_score", "composition_scores", "copying_score", "decompose_residual",
           "direct_logit_attribution", "duplicate_token_score", "head_weights", "induction_score", "intervene",
           "logit_lens", "ov_circuit", "patch_heads", "patching_sweep", "point_names", "previous_token_score",
           "qk_circuit", "record", "replace_at"]
