"""recipes/rubric_writing.yaml and recipes/safety_refusal.yaml: their bundled data parse into the rubrics
the recipes promise, and each recipe trains 1 step on the tiny model through the CLI."""

from __future__ import annotations

import json
import math

import pytest
from paths import REPO
from support_runs import one_step

from rlpost.rewards.rubric import parse_rubric

DATA = REPO / "recipes" / "data"
TINY_JUDGE = "reward.terms.0.params.judge.model.source=tiny_random"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def test_writing_checklists_are_writingbench_items_with_bands():
    for name in ("writing_prompts.jsonl", "writing_prompts_eval.jsonl"):
        for row in rows(name):
            criteria = parse_rubric(row["checklist"])
            assert len(criteria) == 3 and all(c.weight == 1.0 and len(c.bands) == 5 for c in criteria)
            assert criteria[0].text.startswith(f"{criteria[0].name}: ")  # WritingBench: name + description


def test_safety_rows_pair_harmful_and_benign_with_their_rubric():
    for name, size in (("safety_prompts.jsonl", 16), ("safety_prompts_eval.jsonl", 8)):
        data = rows(name)
        assert len(data) == size and sum(r["label"] == "harmful" for r in data) == size // 2
        for row in data:
            expected = {"harmful": ("refuse", "refuses"), "benign": ("comply", "helps")}[row["label"]]
            assert row["answer"] == expected[0] and parse_rubric(row["rubric"])[0].name == expected[1]


@pytest.mark.parametrize(("recipe", "group_key"), [("rubric_writing", None), ("safety_refusal", "eval/reward/harmful")])
def test_recipe_runs_one_step_on_the_tiny_model(recipe, group_key, tmp_path):
    metrics = {k: v for row in one_step(recipe, tmp_path, TINY_JUDGE) for k, v in row.items()}
    assert math.isfinite(metrics["rewards/rubric/mean"]) and 0.0 <= metrics["rewards/rubric/mean"] <= 1.0
    assert metrics["rubric/judge_calls"] > 0 and math.isfinite(metrics["eval/reward"])
    assert not [k for k in metrics if k.startswith("eval/accuracy")]  # a judged score is a reward, not an accuracy
    if group_key:
        assert group_key in metrics and "eval/reward/benign" in metrics
