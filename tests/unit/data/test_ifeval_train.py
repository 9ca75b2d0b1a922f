"""data=ifeval_train (rlpost/data/ifeval_train.py): seeded, conflict-free, disjoint from IFEval, scored by reward=ifeval;
recipe=ifeval_train runs on the tiny model."""

from __future__ import annotations

import json

from if_verifiable.ifeval.instructions_registry import INSTRUCTION_CONFLICTS

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.data.benchmarks import benchmark_rows
from rlpost.data.ifeval_train import ifeval_train_rows
from rlpost.data.sources import load_datasets
from rlpost.scoring.columns import expand_columns
from rlpost.scoring.terms import build_reward_terms

from support.runs import one_step


def test_rows_are_seeded_and_use_ifeval_instructions_without_conflicts():
    rows = ifeval_train_rows(0, 200)
    assert rows == ifeval_train_rows(0, 200) and rows != ifeval_train_rows(1, 200)
    for row in rows:
        ids = json.loads(row["instruction_id_list"])
        assert 1 <= len(ids) == row["num_instructions"] == len(json.loads(row["instruction_kwargs"])) <= 2
        assert "language:response_language" not in ids and "combination:repeat_prompt" not in ids  # excluded
        assert not any(b in INSTRUCTION_CONFLICTS[a] for a in ids for b in ids if a != b)
    assert len({json.loads(r["instruction_id_list"])[0] for r in rows}) >= 15  # the instruction types vary


def test_the_reward_checks_what_the_prompt_asks():
    row = next(r for r in ifeval_train_rows(0, 200) if r["instruction_id_list"] == '["change_case:english_lowercase"]')
    assert "all lowercase letters" in row["question"]
    funcs, names = expand_columns(*build_reward_terms([{"name": "ifeval"}]))[:2]
    columns = {k: [row[k]] * 2 for k in row}
    strict = funcs[names.index("ifeval/prompt_strict")]
    assert strict([row["question"]] * 2, ["a short lowercase answer.", "A Capitalized Answer."], **columns) == [
        1.0,
        0.0,
    ]


def test_splits_are_disjoint_from_each_other_and_from_ifeval():
    run = build_run(compose(["recipe=ifeval_train"]))
    train, evals = load_datasets(run.data)
    assert len(train) == 512 and len(evals) == 100
    key = lambda rows: {r["prompt"][-1]["content"] for r in rows}  # noqa: E731
    assert not key(train) & key(evals)
    assert not (key(train) | key(evals)) & {r["question"] for r in benchmark_rows("ifeval")}


def test_recipe_trains_and_evaluates_on_real_ifeval_prompts(tmp_path):
    small = "eval.sets=[{name: ifeval, data: ifeval, reward: ifeval, size: 3, max_new_tokens: 8}]"
    rows = one_step("ifeval_train", tmp_path, small, "data.eval_size=4")
    metrics = {k: v for row in rows for k, v in row.items()}
    for key in ("rewards/ifeval/prompt_strict/mean", "eval/accuracy", "eval/ifeval/accuracy",
                "eval/ifeval/ifeval/instruction_loose"):  # fmt: skip
        assert key in metrics, key
