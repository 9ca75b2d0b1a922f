"""recipe=crpo, rdpo, structpo, odrpo and tiar, 2 real steps each on the tiny model with their shipped settings
(only size and speed overridden): each logs the quantity its header names as showing the mechanism, finite, and
where the tiny model can make it non-trivial it is: CRPO's per-row clip ranges differ (the persona profiles'
complexity varies; it was 1/60 on every arithmetic row), ODRPO's rater column is not constant and its groups
straddle thresholds. The tiny model writes no <think>/<answer> tag, so the format column of crpo and rdpo is shown
to vary on real SmolLM2 completions instead (tests/config/test_recipes_tags.py); nor does it write structpo's stage
tags (its segments/local_token_frac is 0 here), so structpo's stage-local credit is worked by hand on crafted
completions through the recipe's own reward and advantage (tests/unit/advantages/test_token_credit.py)."""

from __future__ import annotations

import math

import pytest

from rlpost.app import compose
from rlpost.build import build_run

from support.trainer import TINY, step_logs, train_rlpost

SPEED = ["train.steps=2", "train.max_completion_length=8", "data.train_size=16", "data.eval_size=4", "eval.size=4",
         "eval.at_start=false", "eval.at_end=false"]  # fmt: skip
MECHANISM = {
    "crpo": ["adaptive_clip/epsilon_high_std", "adaptive_clip/complexity_mean",
             "rlpost/decoupled/style_abs_mean", "rlpost/decoupled/task_abs_mean"],
    "rdpo": ["rlpost/rdpo/active_columns", "rlpost/rdpo/offdiag_corr"],
    "structpo": ["rlpost/segments/stages_found_mean", "rlpost/segments/local_token_frac",
                 "rlpost/rollout/struct_refine/improved_frac", "rewards/stage_check/plan/mean",
                 "rewards/stage_check/compute/mean", "rewards/stage_check/answer/mean"],
    "odrpo": ["rlpost/odrpo/active_thresholds", "rlpost/odrpo/in_range_frac", "rlpost/odrpo/score_mean"],
    "tiar": ["rlpost/tiar/abstain_weight_mean", "rlpost/tiar/confidence_mean", "rlpost/tiar/abstain_frac"],
}  # fmt: skip


@pytest.mark.parametrize("recipe", sorted(MECHANISM))
def test_two_steps_of_the_recipe_log_its_mechanism(recipe, tmp_path):
    run = build_run(compose([*TINY, f"recipe={recipe}", *SPEED]))
    logs = step_logs(train_rlpost(run, tmp_path))
    assert len(logs) == 2
    for key in MECHANISM[recipe]:
        assert all(math.isfinite(log[key]) for log in logs), (key, [log.get(key) for log in logs])
    if recipe == "crpo":  # the character profiles' complexity differs from row to row: so do the clip ranges
        assert all(log["adaptive_clip/epsilon_high_std"] > 0.01 for log in logs)
    if recipe == "odrpo":  # the noisy 1-10 rater: its column varies, the levels fit it, groups straddle thresholds
        assert any(log["rewards/noisy_rater/std"] > 0 for log in logs)
        assert all(log["rlpost/odrpo/in_range_frac"] == 1.0 for log in logs)
        assert any(log["rlpost/odrpo/active_thresholds"] > 0 for log in logs)
