"""recipes/rubric_writing.yaml, recipes/safety_refusal.yaml and recipes/iap.yaml: their bundled data parse
into the rubrics the recipes promise, and each recipe trains 1 step on the tiny model through the CLI."""

from __future__ import annotations

import json
import math

import pytest

from rlpost.dev.iap_data import main as generate_personal_questions
from rlpost.rewards.rubric import parse_rubric

from support.paths import REPO
from support.runs import one_step

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


def test_personal_questions_hide_the_intent_and_carry_a_two_aspect_rubric(tmp_path):
    generate_personal_questions(["--out", str(tmp_path / "personal_questions.jsonl")])
    for name in ("personal_questions.jsonl", "personal_questions_eval.jsonl"):
        assert (tmp_path / name).read_text() == (DATA / name).read_text(), (
            f"{name}: rerun python -m rlpost.dev.iap_data"
        )
    train, evals = rows("personal_questions.jsonl"), rows("personal_questions_eval.jsonl")
    assert (len(train), len(evals)) == (24, 12)
    for row in train + evals:
        assert [c.name for c in parse_rubric(row["rubric"])] == ["aspect_1", "aspect_2"]
        assert row["intent"] not in row["question"]  # the intent is implicit
    # every held-out topic was seen in training, asked by someone else
    topic = lambda q: q.rsplit(". ", 1)[-1]  # noqa: E731  (the question after the asker's cue)
    assert {topic(r["question"]) for r in evals} == {topic(r["question"]) for r in train}
    assert not {r["intent"] for r in evals} & {r["intent"] for r in train}


def test_iap_recipe_scores_the_schema_and_the_answer_block(tmp_path):
    tiny_judge = "reward.terms.1.params.judge.model.source=tiny_random"
    metrics = {k: v for row in one_step("iap", tmp_path, tiny_judge) for k, v in row.items()}
    assert metrics["rewards/format/mean"] in (0.0, 0.25, 0.5, 0.75, 1.0)  # 4 completions, 0 or 1 each
    # the tiny model writes no <answer> block, so the judge is never called and the rubric scores 0
    assert metrics["rewards/rubric/mean"] == 0.0 and metrics["rubric/judge_calls"] == 0.0
    assert math.isfinite(metrics["eval/reward"]) and not [k for k in metrics if k.startswith("eval/accuracy")]
