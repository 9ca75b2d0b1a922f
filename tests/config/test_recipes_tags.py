"""The second reward column of recipe=crpo (word_recall: persona style) and rdpo (a <think>/<answer> format term)
varies on real completions: SmolLM2-135M-Instruct's samples under each recipe's own template
(recipes/data/tag_completions.jsonl, written by ``python -m rlpost.dev.tag_samples``) scored with the recipe's own
reward terms. The tiny test model writes neither tags nor words, so a tiny run cannot show it (the 2-step runs of
these recipes are in tests/trainer/test_recipes_mechanisms_trainer.py). Under the old template ("Give only the
final answer.") the format column was 0 on every completion, and so was CRPO's style column. recipe=structpo no
longer uses this template (data=staged_arith asks for <plan>/<compute>/<answer> stages, scored per stage by
stage_check): its columns are worked by hand in tests/unit/advantages/test_token_credit.py."""

from __future__ import annotations

import json

import pytest

from rlpost.app import build_run_of, compose
from rlpost.data.sources import load_datasets

from support.paths import REPO

SAMPLES = REPO / "recipes" / "data" / "tag_completions.jsonl"


def samples(name: str) -> list[dict]:
    rows = [json.loads(line) for line in SAMPLES.read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if r["recipe"] == name]


@pytest.mark.parametrize(
    ("recipe", "sample_set", "second"),
    [("crpo", "crpo", "word_recall"), ("rdpo", "tags", "format")],
)
def test_the_second_column_varies_on_smollm2_completions_under_the_recipe_template(recipe, sample_set, second):
    overrides = [f"recipe={recipe}", "data.train_size=12", "data.eval_size=1", "eval.size=1", "seed=0"]  # as sampled
    run = build_run_of(compose(overrides), overrides)
    assert run.reward.names == ["math_answer", second]
    rows = samples(sample_set)
    assert len(rows) == 48
    if second == "format":  # the template asks for the tags the column checks
        assert "<think></think>" in run.data.template and "<answer></answer>" in run.data.template
    rendered = {row["prompt"][-1]["content"] for row in load_datasets(run.data)[0]}
    assert {row["prompt"] for row in rows} <= rendered  # drawn under this very template (regenerate when it changes)
    prompts = [[{"role": "user", "content": r["prompt"]}] for r in rows]
    completions = [[{"role": "assistant", "content": r["completion"]}] for r in rows]
    columns = {k: [r.get(k) for r in rows] for k in ("answer", "profile")}
    values = run.reward.funcs[1](prompts, completions, **columns)
    assert len(set(values)) >= 2, f"{recipe}: {second} is constant ({values[0]}) on every completion"
    assert sum(v > 0 for v in values) >= 3  # not a single fluke
    # within a group of the recipe's G = 4 samples of one prompt it varies too (what a group advantage sees)
    g = run.plan.num_generations
    assert any(len(set(values[i : i + g])) > 1 for i in range(0, len(values), g))
