"""Group accuracy and consistency over the variants of one question (AIR, seed 004 #14), by hand, through
``evaluate`` on a real model, and refused up front without a criterion or column."""

from __future__ import annotations

import json
import math

import pytest
from datasets import Dataset

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.evaluation.evaluate import evaluate
from rlpost.evaluation.invariance import variant_metrics, variant_scores
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.scoring.correctness import Correctness
from rlpost.train import train

from support.runs import TINY_CLI, run_cli
from support.trainer import HASH_REWARD, TINY, make_run, weighted_sum


def test_group_accuracy_and_consistency_by_hand():
    # A: right, right, right   -> every variant right; they agree
    # B: right, wrong          -> not all right; they disagree
    # C: wrong, wrong, None    -> not all right; the two scored agree (None left out)
    # D: None                  -> no scored variant: in neither count
    # E: right                 -> all right (group accuracy); a single variant: not in consistency
    verdicts = [True, True, True, True, False, False, False, None, None, True]
    groups = ["A", "A", "A", "B", "B", "C", "C", "C", "D", "E"]
    # group accuracy = |{A, E}| / |{A, B, C, E}| = 2/4; consistency = |{A, C}| / |{A, B, C}| = 2/3
    assert variant_scores(verdicts, groups) == pytest.approx({"group_accuracy": 0.5, "consistency": 2 / 3, "groups": 4})
    assert variant_metrics(verdicts, groups, "eval/air")["eval/air/variants/consistency"] == pytest.approx(2 / 3)


def test_no_group_with_two_scored_variants_has_no_consistency():
    got = variant_scores([True, False, None], ["a", "b", "b"])  # a: right; b: one scored variant, wrong
    assert got["group_accuracy"] == 0.5 and got["groups"] == 2 and math.isnan(got["consistency"])
    empty = variant_scores([None], ["a"])
    assert empty["groups"] == 0 and math.isnan(empty["group_accuracy"])


def test_evaluate_reports_variant_metrics_with_a_real_model():
    run = make_run([])
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    # intent x: right, right (all right, agree); y: right, wrong (disagree); z: wrong, wrong (agree, not all right)
    scores = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    rows = Dataset.from_list([{"prompt": f"Say {i}", "intent": "xxyyzz"[i], "score": s} for i, s in enumerate(scores)])

    def column_reward(completions, score, **_):  # the row's own column: the verdicts are known in advance
        return score

    result = evaluate(
        model, tokenizer, rows, [column_reward], ["col"], weighted_sum([1.0]), max_new_tokens=2,
        correct=Correctness(0, "col"), variants_of="intent", show_progress=False,
    )  # fmt: skip
    # group accuracy = |{x}| / 3; consistency = |{x, z}| / 3
    assert result["eval/variants/group_accuracy"] == pytest.approx(1 / 3)
    assert result["eval/variants/consistency"] == pytest.approx(2 / 3)
    assert result["eval/variants/groups"] == 3 and result["eval/accuracy"] == pytest.approx(0.5)


def test_variants_of_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    def no_model(*_, **__):
        raise AssertionError("the model loaded before the check")

    monkeypatch.setattr("rlpost.train.load_model", no_model)
    with pytest.raises(ConfigError, match="eval.variants_of='intent_idd' is not a column of the eval split"):
        train(compose([*TINY, "eval.variants_of=intent_idd"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    a_set = "eval.sets=[{name: s, data: basic_arithmetic, size: 4, variants_of: intent_idd}]"
    with pytest.raises(ConfigError, match="eval/s: variants_of='intent_idd' is not a column of data=basic_arithmetic"):
        train(compose([*TINY, a_set]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # a judged reward without a verifiable term: no verdicts to compare
    with pytest.raises(ConfigError, match="eval.variants_of='question' compares correctness verdicts"):
        build_run(compose([*TINY, HASH_REWARD, "eval.correct_term=null", "eval.variants_of=question"]))
    with pytest.raises(ConfigError, match=r"eval.sets\[0\].variants_of='question' compares correctness verdicts"):
        build_run(compose([*TINY, "eval.sets=[{name: s, data: basic_arithmetic, size: 4, correct_term: null, "
                                  "variants_of: question}]"]))  # fmt: skip


def test_air_recipe_logs_variant_metrics_on_the_tiny_model(tmp_path):
    # recipe=air sets eval.variants_of=intent_id: its 6 held-out intents (21 rows) are scored as groups
    run_dir = tmp_path / "run"
    args = [*TINY_CLI, "train.completions_per_step=8", "eval.size=100"]  # 4 prompts: an intent's 4 variants together
    run_cli(["train", "recipe=air", *args, f"hydra.run.dir={run_dir}"], tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = next(r for r in reversed(rows) if "eval/variants/groups" in r)
    assert final["eval/variants/groups"] == 6 and final["eval/num_prompts"] == 21
    assert 0.0 <= final["eval/variants/group_accuracy"] <= 1.0 and 0.0 <= final["eval/variants/consistency"] <= 1.0
