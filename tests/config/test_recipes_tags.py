"""The recipes whose second reward column is a <think>/<answer> format term (crpo, rdpo, structpo) ask for the tags
in their template, and that column varies on real completions: SmolLM2-135M-Instruct's samples under each recipe's
own template (recipes/data/tag_completions.jsonl, written by ``python -m rlpost.dev.tag_samples``) scored with the
recipe's own reward terms. The tiny test model never writes a tag, so a tiny run cannot show it (the 2-step runs
of these recipes are in tests/trainer/test_recipes_mechanisms_trainer.py). Under the old template ("Give only the
final answer.") the format column was 0 on every completion."""

from __future__ import annotations

import json

import pytest
from paths import REPO

from rlpost.app import build_run_of, compose
from rlpost.data.sources import load_datasets

SAMPLES = REPO / "recipes" / "data" / "tag_completions.jsonl"


def samples(name: str) -> list[dict]:
    rows = [json.loads(line) for line in SAMPLES.read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if r["recipe"] == name]


@pytest.mark.parametrize(("recipe", "sample_set"), [("crpo", "crpo"), ("rdpo", "tags"), ("structpo", "tags")])
def test_the_format_column_varies_on_smollm2_completions_under_the_recipe_template(recipe, sample_set):
    overrides = [f"recipe={recipe}", "data.train_size=12", "data.eval_size=1", "seed=0"]  # what the samples used
    run = build_run_of(compose(overrides), overrides)
    rows = samples(sample_set)
    assert len(rows) >= 32
    assert "<think></think>" in run.data.template and "<answer></answer>" in run.data.template  # it asks for them
    rendered = {row["prompt"][-1]["content"] for row in load_datasets(run.data)[0]}
    assert {row["prompt"] for row in rows} <= rendered  # drawn under this very template (regenerate when it changes)
    prompts = [[{"role": "user", "content": r["prompt"]}] for r in rows]
    completions = [[{"role": "assistant", "content": r["completion"]}] for r in rows]
    columns = {"answer": [r["answer"] for r in rows]}
    scores = {name: func(prompts, completions, **columns) for name, func in zip(run.reward.names, run.reward.funcs)}
    assert run.reward.names == ["math_answer", "format"]
    fmt = scores["format"]
    assert len(set(fmt)) >= 2, f"{recipe}: the format column is constant ({fmt[0]}) on every completion"
    assert sum(v > 0 for v in fmt) >= 3  # not a single fluke
    # within a group of the recipe's G = 4 samples of one prompt it varies too (what a group advantage sees)
    g = run.plan.num_generations
    assert any(len(set(fmt[i : i + g])) > 1 for i in range(0, len(fmt), g))
