"""Held-out evaluation: per-column accuracy breakdown (eval.group_by) and its up-front column check; abstention
precision, recall and F1 (rlpost/evaluation/abstention.py) by hand and through evaluate()."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from rlpost.app import compose
from rlpost.core.errors import ConfigError
from rlpost.evaluation.abstention import abstention_metrics, abstention_scores
from rlpost.evaluation.evaluate import _mean_by, evaluate
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.rewards.math_answer import MathAnswer
from rlpost.rewards.ternary_abstention import TernaryAbstention
from rlpost.scoring.correctness import Correctness
from rlpost.scoring.guard import FailurePolicy, GuardedReward
from rlpost.train import train

from support.trainer import HASH_REWARD, TINY, make_run, weighted_sum


def test_accuracy_by_hand_worked():
    # rows: anchor 1, open 0, anchor 0, open 1, open 1 -> anchor (1+0)/2 = 0.5, open (0+1+1)/3 = 2/3
    accuracy = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    got = _mean_by(accuracy, ["anchor", "open", "anchor", "open", "open"])
    assert got == pytest.approx({"eval/accuracy/anchor": 0.5, "eval/accuracy/open": 2 / 3})


def test_accuracy_by_skips_unscorable_rows():
    # nan = the reward could not score the row; nanmean over the rest: a -> 1.0, b -> 0.0
    got = _mean_by(torch.tensor([float("nan"), 1.0, 0.0]), ["a", "a", "b"])
    assert got == {"eval/accuracy/a": 1.0, "eval/accuracy/b": 0.0}


def test_evaluate_reports_per_group_accuracy_with_a_real_model():
    run = make_run([])
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    rows = Dataset.from_list(
        [{"prompt": f"Say {i}", "variant": "anchor" if i % 2 else "open", "score": float(i < 2)} for i in range(4)]
    )

    def column_reward(completions, score, **_):  # the row's own column: the accuracy is known in advance
        return score

    result = evaluate(
        model,
        tokenizer,
        rows,
        [column_reward],
        ["col"],
        weighted_sum([1.0]),
        max_new_tokens=2,
        correct=Correctness(0, "col"),
        group_by="variant",
        show_progress=False,
    )
    # rows 0 (open, 1), 1 (anchor, 1), 2 (open, 0), 3 (anchor, 0)
    assert result["eval/accuracy"] == 0.5
    assert result["eval/accuracy/anchor"] == 0.5 and result["eval/accuracy/open"] == 0.5


def test_unknown_group_by_column_fails_before_the_model_loads(tmp_path, monkeypatch):
    def no_model(*_, **__):
        raise AssertionError("the model loaded before the column check")

    monkeypatch.setattr("rlpost.train.load_model", no_model)
    cfg = compose([*TINY, HASH_REWARD, "eval.group_by=variantt"])
    with pytest.raises(ConfigError, match="eval.group_by='variantt' is not a column.*question"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_evaluate_without_a_criterion_reports_reward_not_accuracy(tmp_path):
    run = make_run([])
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    rows = Dataset.from_list([{"prompt": f"Say {i}", "variant": "ab"[i % 2], "score": i / 4} for i in range(4)])

    seen: list[str] = []

    def judged(completions, score, **_):  # a judged score in [0, 1]: a reward, not a correctness check
        seen[:] = completions  # plain prompts: each completion is the generated string
        return score

    items: list[dict] = []
    result = evaluate(
        model, tokenizer, rows, [judged], ["judge"], weighted_sum([1.0]), max_new_tokens=2, group_by="variant",
        show_progress=False, items=items,
    )  # fmt: skip
    # rewards 0, .25, .5, .75 -> mean 0.375; per variant: a = (0 + .5) / 2, b = (.25 + .75) / 2
    assert result["eval/reward"] == pytest.approx(0.375) and result["eval/judge"] == pytest.approx(0.375)
    assert result["eval/reward/a"] == pytest.approx(0.25) and result["eval/reward/b"] == pytest.approx(0.5)
    assert not [k for k in result if "accuracy" in k]
    assert items[1] == {"index": 1, "reward": 0.25, "completion": seen[1]}  # no score/correct without a criterion
    assert [item["completion"] for item in items] == seen and all(isinstance(t, str) for t in seen)
    # with one, each item says whether it was right: score .75 >= .5 -> correct; 2 of 4 at >= 0.5
    items = []
    result = evaluate(
        model, tokenizer, rows, [judged], ["judge"], weighted_sum([1.0]), max_new_tokens=2,
        correct=Correctness(0, "judge", 0.5), show_progress=False, items=items,
    )  # fmt: skip
    assert result["eval/accuracy"] == 0.5
    assert items[3] == {"index": 3, "reward": 0.75, "score": 0.75, "correct": True, "completion": seen[3]}
    assert items[0]["correct"] is False


def test_abstention_precision_recall_f1_by_hand():
    # abstained [T, T, F, T, F, F], unanswerable [T, F, T, T, F, T]: right abstentions = rows 0 and 3 -> 2;
    # precision 2 / 3 abstained, recall 2 / 4 unanswerable, F1 = 2 (2/3)(1/2) / (2/3 + 1/2) = (2/3) / (7/6) = 4/7
    got = abstention_scores([True, True, False, True, False, False], [True, False, True, True, False, True])
    assert got == pytest.approx({"precision": 2 / 3, "recall": 0.5, "f1": 4 / 7, "rate": 0.5, "unanswerable": 4 / 6})
    # never abstaining: every ratio with an empty denominator is 0 (zero_division=0), so is F1
    none = abstention_scores([False, False], [True, False])
    assert none == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "rate": 0.0, "unanswerable": 0.5}
    assert abstention_scores([True, True], [True, True])["f1"] == 1.0


def test_abstention_metrics_come_from_the_term_that_declares_abstention():
    # the ternary term (guarded, as the trainer and held-out evaluation hold it) declares abstention; a term
    # that does not (math_answer) adds nothing. completions: abstain on unanswerable (hit), answer on
    # unanswerable (miss), abstain on answerable (false alarm), answer on answerable -> P 1/2, R 1/2, F1 1/2
    ternary = GuardedReward(TernaryAbstention(TernaryAbstention.Config()), FailurePolicy())
    texts = ["I don't know", "7", "I don't know", "12"]
    columns = {"answer": ["None", "None", "12", "12"], "unanswerable": [True, True, False, False]}
    got = abstention_metrics([MathAnswer(MathAnswer.Config()), ternary], texts, columns, "eval/set")
    assert got == pytest.approx(
        {f"eval/set/abstention/{k}": v for k, v in {"precision": 0.5, "recall": 0.5, "f1": 0.5, "rate": 0.5,
                                                    "unanswerable": 0.5}.items()}
    )  # fmt: skip
    assert abstention_metrics([MathAnswer(MathAnswer.Config())], texts, columns, "eval") == {}


def test_evaluate_reports_abstention_f1_with_a_real_model():
    # the tiny model's random text abstains where the pattern (a double vowel) happens to match: evaluate()
    # must report the F1 of exactly the completions it scored (its items), against the rows' column
    run = make_run([])
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    flags = [True, False, True, False, True, True]
    rows = Dataset.from_list(
        [{"prompt": f"Say {i}", "answer": "None" if u else "3", "unanswerable": u} for i, u in enumerate(flags)]
    )
    reward = TernaryAbstention(TernaryAbstention.Config(abstain_patterns=["[aeiou][aeiou]", "[a-z]{4}"]))
    items: list[dict] = []
    result = evaluate(
        model, tokenizer, rows, [reward], ["ternary_abstention"], weighted_sum([1.0]), max_new_tokens=6,
        show_progress=False, items=items,
    )  # fmt: skip
    abstained = [reward.abstains(item["completion"]) for item in items]
    expected = abstention_scores(abstained, flags)
    assert {k: result[f"eval/abstention/{k}"] for k in expected} == pytest.approx(expected)
    assert result["eval/abstention/unanswerable"] == pytest.approx(4 / 6)
