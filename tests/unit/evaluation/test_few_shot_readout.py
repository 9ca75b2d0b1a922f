"""Held-out few-shot adaptation (FSA-GRPO, seed 004 #2): accuracy with the demonstrations minus without them, by
hand, through ``evaluate`` on a real model (the second pass really answers the zero-shot turns), refused up front
without a column or a criterion, and logged by a 2-step run of recipe=fsa_grpo on the tiny model."""

from __future__ import annotations

import json
import math

import pytest
from datasets import Dataset

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.evaluation.evaluate import evaluate
from rlpost.evaluation.few_shot import few_shot_metrics, few_shot_scores
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.scoring.correctness import Correctness
from rlpost.train import train

from support.runs import TINY_CLI, run_cli
from support.trainer import HASH_REWARD, TINY, make_run, weighted_sum


def test_gain_by_hand():
    # rows: (with, without) = (T, F), (T, T), (F, F), (None, T), (T, None), (F, T)
    # paired rows: 0, 1, 2, 5 -> with 2/4, without 2/4... row 5 (F, T) makes without = |{1, 5}| / 4 = 0.5
    with_demos = [True, True, False, None, True, False]
    without = [False, True, False, True, None, True]
    assert few_shot_scores(with_demos, without) == pytest.approx(
        {"with_demos": 0.5, "without_demos": 0.5, "gain": 0.0, "rows": 4}
    )
    # rows 0..2 only: with 2/3, without 1/3, gain 1/3
    got = few_shot_metrics(with_demos[:3], without[:3], "eval/ops")
    assert got == pytest.approx(
        {"eval/ops/few_shot/with_demos": 2 / 3, "eval/ops/few_shot/without_demos": 1 / 3,
         "eval/ops/few_shot/gain": 1 / 3, "eval/ops/few_shot/rows": 3}
    )  # fmt: skip
    empty = few_shot_scores([None], [True])
    assert empty["rows"] == 0 and math.isnan(empty["gain"])


def test_evaluate_answers_the_zero_shot_turns_and_reports_the_gain_with_a_real_model():
    run = make_run([])
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    # The verdict is the row's column for the turn the model answered: `ok_with` for the prompt with its
    # demonstrations, `ok_without` for the zero_shot turn (None: unscored), so the paired means are known:
    # rows 0..3 paired (row 4 unscored without) -> with = 3/4, without = 1/4, gain = 1/2
    ok_with = [1.0, 1.0, 1.0, 0.0, 1.0]
    ok_without = [0.0, 1.0, 0.0, 0.0, None]
    rows = Dataset.from_list(
        [{"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": f"Examples: 1 2 3. Say {i}"}],
          "zero_shot": f"Say {i}", "ok_with": a, "ok_without": b if b is not None else -1.0}
         for i, (a, b) in enumerate(zip(ok_with, ok_without))]
    )  # fmt: skip
    seen: list[list] = []

    def turn_reward(prompts, completions, ok_with, ok_without, **_):
        seen.append(prompts)
        return [
            a if p[-1]["content"].startswith("Examples") else (None if b < 0 else b)
            for p, a, b in zip(prompts, ok_with, ok_without)
        ]

    result = evaluate(
        model, tokenizer, rows, [turn_reward], ["ok"], weighted_sum([1.0]), max_new_tokens=2,
        correct=Correctness(0, "ok"), without_demos="zero_shot", show_progress=False,
    )  # fmt: skip
    assert result["eval/accuracy"] == pytest.approx(4 / 5)  # the ordinary pass, every row scored
    assert result["eval/few_shot/with_demos"] == pytest.approx(3 / 4)
    assert result["eval/few_shot/without_demos"] == pytest.approx(1 / 4)
    assert result["eval/few_shot/gain"] == pytest.approx(1 / 2) and result["eval/few_shot/rows"] == 4
    # the second pass put the zero_shot text in place of the user turn and kept the system message
    assert seen[1] == [[{"role": "system", "content": "S"}, {"role": "user", "content": f"Say {i}"}] for i in range(5)]


def test_without_demos_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    def no_model(*_, **__):
        raise AssertionError("the model loaded before the check")

    monkeypatch.setattr("rlpost.train.load_model", no_model)
    with pytest.raises(ConfigError, match="eval.without_demos='zero_shott' is not a column of the eval split"):
        train(compose([*TINY, "data=few_shot_ops", "eval.without_demos=zero_shott"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="eval.without_demos='zero_shot' compares correctness verdicts"):
        build_run(compose([*TINY, HASH_REWARD, "data=few_shot_ops", "eval.correct_term=null",
                           "eval.without_demos=zero_shot"]))  # fmt: skip
    with pytest.raises(ConfigError, match="eval.without_demos='zero_shot' compares the greedy verdicts"):
        build_run(compose([*TINY, "data=few_shot_ops", "eval.greedy=false", "eval.without_demos=zero_shot"]))
    a_set = "eval.sets=[{name: ops, data: few_shot_ops, size: 4, greedy: false, samples: 2, without_demos: zero_shot}]"
    with pytest.raises(ConfigError, match="without_demos='zero_shot' reads the greedy verdicts"):
        build_run(compose([*TINY, a_set]))


def test_fsa_grpo_recipe_logs_the_few_shot_readout_on_the_tiny_model(tmp_path):
    # recipe=fsa_grpo: 2 steps on the tiny model; the held-out readout on unseen operators is logged before and
    # after, and the few-shot term's per-step logs come from the trainer's policy forward
    run_dir = tmp_path / "run"
    args = [*TINY_CLI, "train.steps=2", "eval.at_start=true", "eval.size=6"]
    run_cli(["train", "recipe=fsa_grpo", *args, f"hydra.run.dir={run_dir}"], tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/few_shot/gain" in r]
    assert len(evals) == 2  # at start and at end
    for r in evals:
        assert r["eval/few_shot/rows"] == 6
        assert r["eval/few_shot/gain"] == pytest.approx(
            r["eval/few_shot/with_demos"] - r["eval/few_shot/without_demos"]
        )
        assert r["eval/few_shot/with_demos"] == pytest.approx(r["eval/accuracy"])  # every held-out row scored
    steps = [r for r in rows if "few_shot_gain/zero_shot_p" in r]
    assert len(steps) == 2 and all(0.0 < r["few_shot_gain/zero_shot_p"] < 1.0 for r in steps)
    assert all(0.0 <= r["few_shot_gain/copied"] <= 1.0 for r in steps)
