"""eval/accuracy's criterion (rlpost/scoring/correctness.py): which term, which threshold, and where there is none."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.evaluation.evaluate import sample_metrics
from rlpost.evaluation.objective import resolve_objective
from rlpost.scoring.correctness import Correctness, find_correctness

from support.trainer import weighted_sum

NAN = float("nan")


def test_accuracy_counts_scored_samples_at_or_above_the_threshold():
    # code_exec-like fractions of tests passed, threshold 1: [1, 0.5, NaN, 1] -> 2 correct of 3 scored
    scores = torch.tensor([[1.0, 9.0], [0.5, 9.0], [NAN, 9.0], [1.0, 9.0]])  # [N=4, R=2]
    c = Correctness(0, "code_exec", 1.0)
    assert c.correct(scores).tolist() == [True, False, False, True]  # unscored: not correct
    assert c.scored(scores).tolist() == [True, True, False, True]
    assert c.accuracy(scores) == pytest.approx(2 / 3)
    # ternary abstention (+1 right, 0 abstained, -1 wrong): only +1 is correct -> 1 of 3
    assert Correctness(0, "t", 1.0).accuracy(torch.tensor([[1.0], [0.0], [-1.0]])) == pytest.approx(1 / 3)
    # a lower threshold: partial credit 0.5 counts -> 3 of 3
    assert Correctness(0, "code_exec", 0.5).accuracy(scores) == 1.0
    assert math.isnan(c.accuracy(torch.tensor([[NAN, 1.0]])))  # nothing scored: no number


def test_find_correctness_auto_named_and_none():
    names = ["rubric", "math_answer", "format"]
    assert find_correctness([False, True, False], names, "auto", 1.0) == Correctness(1, "math_answer", 1.0)
    assert find_correctness([False, False], ["rubric", "length"], "auto", 1.0) is None  # nothing verifiable
    assert find_correctness([False, True, False], names, "format", 0.5) == Correctness(2, "format", 0.5)
    assert find_correctness([False, True, False], names, None, 1.0) is None
    with pytest.raises(
        ConfigError, match=r"eval.correct_term='fmt' is not a reward term .* rubric, math_answer, format"
    ):
        find_correctness([False, True, False], names, "fmt", 1.0)


def test_objective_auto_follows_the_criterion_and_accuracy_needs_one():
    c = Correctness(0, "math_answer")
    assert resolve_objective("auto", c, ["math_answer"]) == "eval/accuracy"
    assert resolve_objective("auto", None, ["rubric"]) == "eval/reward"
    assert resolve_objective("eval/reward", c, ["math_answer"]) == "eval/reward"
    with pytest.raises(ConfigError, match="eval.objective=eval/accuracy needs a correctness criterion.*rubric"):
        resolve_objective("eval/accuracy", None, ["rubric"])
    with pytest.raises(ConfigError, match="eval.objective=eval/accuracy/harmful needs"):
        resolve_objective("eval/accuracy/harmful", None, ["rubric"])


def test_a_rubric_run_has_no_accuracy_and_optimizes_its_reward():
    # issue 22: `rlpost train algorithm=gepo reward=rubric` reported the judge's mean score as accuracy
    run = build_run(compose(["algorithm=gepo", "reward=rubric"]))
    assert run.correct is None and run.settings.eval.objective == "eval/reward"
    default = build_run(compose([]))
    assert default.correct == Correctness(0, "math_answer", 1.0)
    assert default.settings.eval.objective == "eval/accuracy"
    # a judged run can still name a criterion, with its threshold
    judged = build_run(compose(["reward=rubric", "eval.correct_term=rubric", "eval.correct_threshold=0.8"]))
    assert judged.correct == Correctness(0, "rubric", 0.8) and judged.settings.eval.objective == "eval/accuracy"
    with pytest.raises(ConfigError, match="eval.objective=eval/accuracy needs a correctness criterion"):
        build_run(compose(["reward=rubric", "eval.objective=eval/accuracy"]))


def test_sampled_metrics_without_a_criterion_report_the_reward_only():
    # 1 prompt, n = 2: rewards 0.2 and 0.6 -> mean 0.4, population std 0.2; no accuracy, pass@k, maj@k
    scores = torch.tensor([[[0.2], [0.6]]])
    m = sample_metrics(scores, weighted_sum([1.0]), torch.tensor([[3, 5]]), [1, 2], None, "s", [["1", "1"]])
    assert m["s/reward"] == pytest.approx(0.4) and m["s/reward_std"] == pytest.approx(0.2)
    assert m["s/mean_length"] == 4.0 and m["s/signal_fraction"] == 1.0
    assert not [k for k in m if any(w in k for w in ("accuracy", "pass@", "maj@", "avg@", "headroom"))]
