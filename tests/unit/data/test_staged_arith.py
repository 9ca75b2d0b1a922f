"""data=staged_arith (StructPO, seed 000 #10): seeded and disjoint splits; every row's per-stage columns are what the
question implies (recomputed here from its words); the gold solution scores full marks on every term of
recipe=structpo; the cold start (recipe=structpo_cold_start) trains on exactly those solutions."""

from __future__ import annotations

import re

import pytest

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.sources import load_datasets
from rlpost.sft.config import build_job

from support.config import from_yaml

WORDS = {"add": "+", "subtract": "-", "multiply by": "*"}


def question(row) -> str:
    return row["prompt"][-1]["content"].split("\n")[0]


def test_splits_are_seeded_and_disjoint_and_the_columns_follow_from_the_question():
    cfg = from_yaml("staged_arith", train_size=200, eval_size=60)
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (200, 60) and not {question(r) for r in train} & {question(r) for r in evals}
    assert [question(r) for r in load_datasets(cfg)[0]] == [question(r) for r in train]
    rows = list(train) + list(evals)
    assert {r["steps"] for r in rows} == {2, 3}  # min_steps 2, max_steps 3
    for row in rows:
        text = question(row)
        value = int(re.match(r"Start with (\d+)\. ", text)[1])
        steps = re.findall(r"(add|subtract|multiply by) (\d+)", text, re.IGNORECASE)
        assert len(steps) == row["steps"]
        plan, lines, values = [], [], []
        for word, b in steps:  # the running value, step by step
            op = WORDS[word.lower()]
            after = {"+": value + int(b), "-": value - int(b), "*": value * int(b)}[op]
            plan.append(f"{op} {b}")
            lines.append(f"{value} {op} {b} = {after}")
            values.append(str(after))
            value = after
        assert row["plan"] == ", ".join(plan) and row["intermediates"] == ", ".join(values)
        assert row["answer"] == str(value)
        assert row["solution"] == (
            f"<plan>{row['plan']}</plan>\n<compute>" + "\n".join(lines) + f"</compute>\n<answer>{value}</answer>"
        )
        assert "<plan>" in row["prompt"][-1]["content"] and "<answer>" in row["prompt"][-1]["content"]
    with pytest.raises(ConfigError, match="min_steps"):
        load_datasets(from_yaml("staged_arith", task_params={"min_steps": 4, "max_steps": 3}))


def test_the_gold_solution_scores_full_marks_under_recipe_structpo_and_is_the_cold_start_target():
    sizes = ["model=tiny-random", "data.train_size=16", "data.eval_size=4", "eval.size=4"]
    run = build_run(compose(["recipe=structpo", *sizes]))
    train, _ = load_datasets(run.data)
    completions = [[{"role": "assistant", "content": s}] for s in train["solution"]]
    columns = {k: train[k] for k in ("answer", "plan", "intermediates")}
    for name, func in zip(run.reward.names, run.reward.funcs):
        assert func(train["prompt"], completions, **columns) == [1.0] * 16, name
    job = build_job(compose(["recipe=structpo_cold_start", *sizes], "sft"))
    assert job.targets == train["solution"] and job.prompts == train["prompt"]
    assert job.run.reward.names == run.reward.names and job.run.correct.name == "math_answer"
