"""rlpost compare on data=mixture runs (rlpost/tools/compare.py ``source_metrics``, rlpost/analysis/compare.py
``item_field`` and ``prompt_values``): without ``metrics=``, each source's held-out metrics follow the pooled
ones; a source's per-prompt values are the held-out items of that source alone."""

from __future__ import annotations

import json

import yaml

from rlpost.analysis.compare import item_field, prompt_values
from rlpost.analysis.reductions import parse_metric
from rlpost.analysis.sweep import load_job
from rlpost.tools.compare import CompareSettings, source_metrics

SOURCES = [{"name": "arith", "data": "basic_arithmetic"}, {"name": None, "data": "chain_sum"}]


def mixture_run(folder, seed: int):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "data": {"sources": SOURCES}}))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/accuracy": 0.5}) + "\n")
    # the pooled held-out items of rlpost/evaluation/held_out.py: arith's prompts first, then chain_sum's
    items = [{"index": 0, "correct": 1.0, "reward": 1.0, "source": "arith"},
             {"index": 1, "correct": 0.0, "reward": 0.2, "source": "arith"},
             {"index": 2, "correct": 1.0, "reward": 0.9, "source": "chain_sum"}]  # fmt: skip
    (folder / "eval_items.json").write_text(json.dumps(items))
    return folder


def test_each_sources_metrics_follow_the_pooled_ones_unless_metrics_are_given(tmp_path):
    runs = [str(mixture_run(tmp_path / f"s{seed}", seed)) for seed in (0, 1)]
    s = CompareSettings(runs=runs)
    assert source_metrics(s, []) == [
        "eval/accuracy", "eval/arith/accuracy", "eval/chain_sum/accuracy",  # a source without a name: its data
        "eval/reward", "eval/arith/reward", "eval/chain_sum/reward",
    ]  # fmt: skip
    assert source_metrics(CompareSettings(runs=runs, metrics=["eval/accuracy:gain"]), []) == [
        "eval/accuracy:gain", "eval/arith/accuracy:gain", "eval/chain_sum/accuracy:gain"]  # fmt: skip
    given = CompareSettings(runs=runs, metrics=["eval/accuracy"])
    assert source_metrics(given, ["metrics=[eval/accuracy]"]) == ["eval/accuracy"]  # the user's list stands
    listed = CompareSettings(runs=runs, expect=["higher", "higher"])  # per-metric lists pair with the given metrics
    assert source_metrics(listed, []) == ["eval/accuracy", "eval/reward"]


def test_a_sources_per_prompt_values_are_its_own_items(tmp_path):
    assert item_field("eval/accuracy") == ("correct", None)
    assert item_field("eval/arith/reward") == ("reward", "arith")
    assert item_field("eval/arith/mean_length") is None and item_field("reward") is None
    job = load_job(mixture_run(tmp_path / "run", 0))
    assert prompt_values(job, parse_metric("eval/accuracy")) == {0: 1.0, 1: 0.0, 2: 1.0}
    assert prompt_values(job, parse_metric("eval/arith/accuracy")) == {0: 1.0, 1: 0.0}
    assert prompt_values(job, parse_metric("eval/chain_sum/reward")) == {2: 0.9}
    assert prompt_values(job, parse_metric("eval/gsm8k/accuracy")) is None  # an eval set's metric: no such source
