"""Every lesson runs top to bottom with --quick, writes its figures and ends with a RESULT line that carries its
metrics. (The full runs and their targets are checked by the lessons' own asserts, outside the test suite.)"""
import json
import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tinyattn import lesson as lesson_module

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py"))
EXPECTED_KEYS = {
    "01": {"bottleneck_long_acc_plain", "bottleneck_long_acc_attention"},
    "02": {"dates_exact_match", "dates_alignment"},
    "03": {"sdpa_max_abs_err", "backward_max_abs_err", "multihead_max_abs_err", "equivariance_err"},
    "04": {"flash_max_abs_err", "blockwise_backward_max_abs_err", "flash_memory_ratio", "flash_memory_growth",
           "whole_matrix_memory_growth", "trace_tiles", "trace_max_error", "saved_bytes_naive", "saved_bytes_flash"},
    "05": {"translation_exact_match"},
    "06": {"lm_val_bpc", "lm_bigram_bpc", "kv_cache_speedup", "gpt_by_hand_max_abs_err"},
    "07": {"pre-norm_val_bpc", "mqa_val_bpc", "kv_bytes_per_token", "moe_flops_ratio"},
    "08": {"vit_test_acc"},
    "09": {"swin_test_acc", "mixer_test_acc"},
    "10": {"caption_exact_match"},
    "11": {"vit_pe_ablation_acc", "vit_pe_small_patches_acc"},
    "12": {"vit_new_resolution_acc_interpolated", "vit_new_resolution_acc_without"},
    "13": {"lm_extrapolation_bpc"},
    "14": {"vit_no_distill_acc", "deit_soft_acc", "deit_hard_acc"},
    "15": {"cnn_self_attention_acc", "local_attention_acc", "attention_pooling_acc", "cnn_gap_acc"},
    "16": {"mobile_former_acc"},
    "17": {"swin_shift_mask_err", "window_scores_match"},
    "18": {"prenorm_deep_final_loss", "postnorm_deep_final_loss"},
    "19": {"complexity_params_match", "complexity_flops_match", "saved_bytes_naive", "saved_bytes_flash"},
    "20": {"induction_score_max", "prev_token_score_max", "prev_token_score_layer0_sum", "in_context_gain_nats",
           "ablation_gain_removed", "induction_heads_ablation_gain_removed", "second_copy_loss",
           "one_layer_second_copy_loss", "k_composition_max", "k_composition_partner_is_prev_token",
           "copying_score_induction", "copying_score_others_max", "residual_decomposition_error", "dla_top_head"},
    "21": {"bpe_ids_match", "bpe_roundtrip", "bytes_per_token"},
    "22": {"ddp_max_param_diff", "ring_allreduce_max_error", "ring_attention_max_error", "zero_state_bytes_ratio",
           "allreduce_alpha_us", "allreduce_beta_gbps", "overlap_fraction"},
}


TRAINED = {"01", "02", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "17", "18"}  # accuracies


def run(args, tmp_path, timeout=120):
    env = {**os.environ, "TINYATTN_PLOTS": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable] + args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_every_lesson_has_expected_keys():
    assert {p.name[:2] for p in LESSONS} == set(EXPECTED_KEYS)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_quick_run(lesson, tmp_path):
    # a seed other than the default: a lesson must not assume seed 0 anywhere (lesson 18 once did, and crashed)
    result = run([str(lesson), "--quick", "--seed", "5"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1 and result.stdout.rstrip().endswith(lines[0]), "RESULT must be the last line, once"
    metrics = json.loads(lines[0][len("RESULT "):])
    missing = EXPECTED_KEYS[lesson.name[:2]] - set(metrics)
    assert not missing, f"RESULT lacks {missing}"
    if lesson.name[:2] in TRAINED:
        note = lesson_module.quick_note(SimpleNamespace(quick=True))
        assert note in result.stdout, "a quick run's accuracies and losses must say it is too small to learn"
    figures = list(tmp_path.glob("*.png"))
    assert figures, "the lesson wrote no figure"
    assert all(f.name.startswith(lesson.name[:2]) for f in figures)


def test_lessons_listing(tmp_path):
    listing = run(["-m", "lessons"], tmp_path)
    assert listing.returncode == 0
    assert all(f"{p.name[:2]}  " in listing.stdout for p in LESSONS)
    numbers = [line[:2] for line in listing.stdout.splitlines() if line[:2].isdigit()]
    assert numbers[5:8] == ["06", "21", "07"], "lesson 21 (the tokenizer) is read after 06 (the GPT); 07-20 stay"
    assert [n for n in numbers if n != "21"] == sorted(n for n in numbers if n != "21")
    missing = run(["-m", "lessons", "99"], tmp_path)
    assert missing.returncode != 0 and "no lesson" in missing.stderr


def test_seed_and_first_line(tmp_path):
    """--seed N seeds every draw of a run: the same seed gives the same numbers, another seed others; the first line
    says what the run ran on."""
    runs = {seed: run([str(LESSONS[2]), "--quick", "--seed", str(seed)], tmp_path) for seed in (1, 2)}
    again = run([str(LESSONS[2]), "--quick", "--seed", "1"], tmp_path)
    result = {seed: r.stdout.rstrip().splitlines()[-1] for seed, r in runs.items()}
    assert again.stdout.rstrip().splitlines()[-1] == result[1] != result[2]
    first = runs[1].stdout.splitlines()[0]
    for word in ("tinyattn", "NumPy", "loops", "kernel", "threads", "device", "seed 1", "quick"):
        assert word in first, first


def test_a_run_leaves_the_checkout_clean():
    """Figures of ordinary runs go to plots/runs/ (ignored by git); only --gallery writes the README's plots/."""
    status = ["git", "status", "--porcelain", "--untracked-files=all"]
    before = subprocess.run(status, cwd=ROOT, capture_output=True, text=True)
    if before.returncode != 0:
        pytest.skip("not a git checkout")
    env = {k: v for k, v in os.environ.items() if k != "TINYATTN_PLOTS"}
    result = subprocess.run([sys.executable, str(LESSONS[2]), "--quick"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "figure: plots/runs/quick/03_" in result.stdout
    after = subprocess.run(status, cwd=ROOT, capture_output=True, text=True)
    assert after.stdout == before.stdout
