"""data=mixture in a real run (issue 49, rlpost/data/mixture.py): recipe=mixture_demo on the tiny model, 2 steps.
Each step's generation batch holds one prompt of each source (2 x 4 completions), each source's reward term
scores only its own rows (the other source's column is NaN there, so its mean is over its own rows), the
calculator source plays episodes, and the held-out evaluation reports each source and the pool."""

from __future__ import annotations

import json
import math

from rlpost.app import compose
from rlpost.train import train

from support.trainer import TINY

FAST = [o for o in TINY if not o.startswith(("train.max_completion_length", "data.", "eval.size"))]


def test_mixture_demo_trains_each_source_on_its_own_reward_and_evaluates_each(tmp_path):
    overrides = ["recipe=mixture_demo", *FAST, "train.steps=2", "train.max_completion_length=8", "eval.size=2",
                 "logging.plots=false"]  # fmt: skip
    run_dir = tmp_path / "run"
    summary = train(compose(overrides), run_dir)
    assert summary["steps"] == 2
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "grad_norm" in row]
    assert len(steps) == 2
    for row in steps:
        # one prompt of each source per batch: groups never mix sources (the sampler's allocation, 0.5 x 2)
        assert row["mixture/arithmetic/prompts"] == 1.0 and row["mixture/calculator/prompts"] == 1.0
        for key in ("rewards/arithmetic/math_answer/mean", "rewards/calculator/env/mean", "env/turns"):
            assert math.isfinite(row[key]), (key, row.get(key))
        assert 0.0 <= row["rewards/arithmetic/math_answer/mean"] <= 1.0
    evals = [row for row in rows if "eval/accuracy" in row]
    assert [row["step"] for row in evals] == [0, 2]
    for row in evals:  # each source's held-out split, and the pool over both (eval.size=2 prompts of each)
        a, c = row["eval/arithmetic/accuracy"], row["eval/calculator/accuracy"]
        assert row["eval/num_prompts"] == 4
        assert row["eval/accuracy"] == (a + c) / 2  # equal sizes: the pooled accuracy is the mean of the two
