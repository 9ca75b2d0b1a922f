"""Calibration of sampled numeric predictions (DAR, seed 004 #15): CRPS, coverage, width, rank correlation and
parsable share by hand; the predictions read from sampled completions by ``evaluate_sampled``; bad settings refused."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from datasets import Dataset

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.ranks import average_ranks
from rlpost.evaluation import evaluate as evaluate_module
from rlpost.evaluation.calibration import calibration_scores, quantile, spearman
from rlpost.evaluation.evaluate import evaluate_sampled

from support.runs import TINY_CLI, run_cli
from support.trainer import TINY, weighted_sum


def test_quantile_matches_numpys_default_and_ranks_average_ties():
    rng = random.Random(0)
    for _ in range(20):
        xs = [rng.uniform(-5, 5) for _ in range(rng.randint(1, 9))]
        for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))
    assert average_ranks([2.0, 10.0, 2.0]) == [1.5, 3.0, 1.5]  # the ranks spearman reads
    assert math.isnan(spearman([1.0], [2.0])) and math.isnan(spearman([1.0, 1.0], [1.0, 2.0]))  # one / a constant


def test_calibration_scores_by_hand():
    predictions = [[1, 2, 3, None], [10, 10], [None, None], [7], [0, 4]]
    targets = [2, 4, 5, None, 1]
    got = calibration_scores(predictions, targets, level=0.5)
    # scored prompts: 1, 2, 5 (3 has no number, 4 no target); CRPS = mean|x - y| - sum_ij |x_i - x_j| / (2 m^2)
    #   p1: xs 1 2 3, y 2: 2/3 - 8/18 = 2/9; median 2 (|e| 0); q.25 = 1.5, q.75 = 2.5: covered, width 1
    #   p2: xs 10 10, y 4: 6 - 0 = 6;        median 10 (|e| 6); [10, 10]: not covered, width 0
    #   p5: xs 0 4,  y 1:  2 - 8/8 = 1;      median 2 (|e| 1);  q.25 = 1, q.75 = 3: covered (1 <= 1), width 2
    # rank_corr: medians 2 10 2 -> ranks 1.5 3 1.5; targets 2 4 1 -> ranks 2 3 1; cov 1.5 / sqrt(1.5 * 2)
    # parsable: prompts with a target hold 4 + 2 + 2 + 2 = 10 samples, 3 + 2 + 0 + 2 = 7 with a number
    assert got == pytest.approx(
        {
            "crps": (2 / 9 + 6 + 1) / 3,
            "mae": 7 / 3,
            "coverage": 2 / 3,
            "width": 1.0,
            "rank_corr": 1.5 / math.sqrt(3.0),
            "parsable": 0.7,
            "prompts": 3,
        }
    )
    none = calibration_scores([[None]], [3.0])
    assert none["prompts"] == 0 and none["parsable"] == 0 and math.isnan(none["crps"])


def test_evaluate_sampled_reads_each_samples_last_number(monkeypatch):
    # the sampled texts are scripted (a random tiny model writes no numbers); the rest of the path is real
    texts = ["It is 1.", "It is 3.", "10", "<think>4 is it?</think> 10"]  # 2 prompts x n = 2, prompt-major

    def scripted(model, tokenizer, prompts, max_new_tokens, greedy, temperature, n=1, top_p=1.0):
        assert n == 2 and not greedy
        return texts, [3] * len(texts)

    monkeypatch.setattr(evaluate_module, "_generate", scripted)
    rows = Dataset.from_list([{"prompt": "a", "answer": "2"}, {"prompt": "b", "answer": "4"}])
    result = evaluate_sampled(
        torch.nn.Linear(1, 1), None, rows, [lambda completions, **_: [0.0] * len(completions)], weighted_sum([1.0]),
        n=2, ks=[1], max_new_tokens=4, correct=None, show_progress=False, calibration="answer", calibration_level=0.5,
    )  # fmt: skip
    # p1: xs 1 3, y 2: CRPS 1 - 4/8 = 0.5, median 2; p2: xs 10 10 (after </think>), y 4: CRPS 6, median 10
    assert result["sampled/calibration/crps"] == pytest.approx(3.25)
    assert result["sampled/calibration/mae"] == pytest.approx(3.0)
    assert result["sampled/calibration/coverage"] == pytest.approx(0.5)  # p1: [1.5, 2.5] holds 2; p2: [10, 10]
    assert result["sampled/calibration/parsable"] == 1.0 and result["sampled/calibration/rank_corr"] == pytest.approx(1)


def test_calibration_needs_samples_and_its_column():
    with pytest.raises(ConfigError, match=r"eval.calibration='answer' .* set eval.samples >= 2 \(got 1\)"):
        build_run(compose([*TINY, "eval.calibration=answer", "eval.samples=1"]))
    with pytest.raises(ConfigError, match="calibration_level=1.0 must be in"):
        build_run(compose([*TINY, "eval.calibration=answer", "eval.samples=2", "eval.calibration_level=1.0"]))
    with pytest.raises(ConfigError, match=r"eval.sets\[0\].*calibration='answer' reads a distribution"):
        build_run(compose([*TINY, "eval.sets=[{name: s, data: basic_arithmetic, size: 4, calibration: answer}]"]))
    run = build_run(compose([*TINY, "eval.calibration=answer", "eval.samples=2"]))
    assert run.settings.eval.data_columns() == {"eval.calibration": "answer"}


def test_dar_recipe_logs_its_reward_and_held_out_calibration_on_the_tiny_model(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "recipe=dar", *TINY_CLI, "eval.samples=2", "eval.pass_k=[1]", f"hydra.run.dir={run_dir}"]
    run_cli(args, tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = next(r for r in reversed(rows) if "eval/sampled/calibration/parsable" in r)
    assert final["eval/sampled/calibration/prompts"] <= 4 and 0.0 <= final["eval/sampled/calibration/parsable"] <= 1
    trained = next(r for r in rows if "loss" in r)
    assert "rewards/dar/mean" in trained and "dar/parsable" in trained, trained  # the reward and its own figures
