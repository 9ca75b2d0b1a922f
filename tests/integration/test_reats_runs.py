"""REATS's two stages through the real CLI on the tiny random model: ``rlpost sft recipe=reats_sft`` teaches it the
percentage-table format, then ``rlpost train recipe=reats`` from that checkpoint runs 2 GRPO steps in which the
reward (the reciprocal map of the forecast-MSE gap to the oracle ensemble) differs within a group, and the held-out
readout ``eval/ens_gap`` is logged. Without the SFT stage the tiny model never writes a table, and every completion
gets the same ``unparsable`` reward."""

from __future__ import annotations

import json
import math

import pytest

from support.runs import run_cli

QUIET = ["model=tiny-random", "logging.trackers=[]", "logging.progress=false", "logging.plots=false"]


def rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_sft_then_two_grpo_steps_whose_reward_varies_within_groups(tmp_path):
    sft_dir, grpo_dir = tmp_path / "sft", tmp_path / "grpo"
    # a short series (8 values, 3 shown, 2 forecast steps) and the table alone as the target (about 20 tokens):
    # what 20 steps can teach a 2-layer random model (the recipe's target adds the rationale line); a step's cost is
    # the 49k-token vocabulary over every position
    small = ["data.task_params.history=8", "data.task_params.window=3", "data.task_params.horizon=2",
             "data.train_size=32", "data.eval_size=4", "eval.size=4"]  # fmt: skip
    sft = ["sft", "recipe=reats_sft", *QUIET, *small, 'target="{answer}"', "train.steps=20", "train.prompts_per_step=4",
           "train.learning_rate=1e-2", "eval.at_start=false", "eval.at_end=false", f"hydra.run.dir={sft_dir}"]  # fmt: skip
    run_cli(sft, tmp_path)
    grpo = ["train", "recipe=reats", *QUIET, *small, "model=hf", f"model.path={sft_dir}/checkpoints/final",
            "train.steps=2", "train.num_generations=4", "train.completions_per_step=8",
            "train.max_completion_length=24", "eval.at_start=false", f"hydra.run.dir={grpo_dir}"]  # fmt: skip
    run_cli(grpo, tmp_path)
    logged = rows(grpo_dir)
    steps = [row for row in logged if "grad_norm" in row]
    assert len(steps) == 2
    # some group's four tables scored differently: a parsable table's reciprocal reward lies in (0, 1] and an
    # unparsable one gets 0, so the group advantage is not zero everywhere
    assert min(row["frac_reward_zero_std"] for row in steps) < 1.0
    assert any(row["rewards/ensemble_weights/std"] > 0 for row in steps)
    for row in steps:  # the weight-0 readout: the mean gap, >= 0, never part of the reward
        assert 0.0 <= row["rewards/ensemble_weights/mean"] <= 1.0 and row["rewards/ens_gap/mean"] >= 0.0
        assert row["reward"] == pytest.approx(row["rewards/ensemble_weights/mean"])
    final = next(row for row in logged if "eval/ens_gap" in row)
    assert math.isfinite(final["eval/ens_gap"]) and final["eval/ens_gap"] >= 0.0
    assert 0.0 <= final["eval/reward"] <= 1.0
    assert {k for k in final if k.startswith("eval/reward/")} <= {
        f"eval/reward/{r}" for r in ("trend", "random_walk", "noisy_level")
    }
    assert any(k.startswith("eval/reward/") for k in final)  # eval.group_by=regime
