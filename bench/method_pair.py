"""One method/baseline pair of ``bench/method_experiments.py`` (its recipe, its GRPO baseline at equal steps,
the metrics its abstract says should move, the held-out keys to report) and the overrides pairs share."""

from __future__ import annotations

from dataclasses import dataclass, field

QWEN_JUDGE = "reward.terms.0.params.judge.model.source=qwen2_5_coder"  # a judge that tells the criteria apart
# the whole IFEval benchmark as the run's eval set (conf/eval_sets/ifeval.yaml holds the first 100)
FULL_IFEVAL = "eval.sets=[{name: ifeval, data: ifeval, reward: ifeval, size: 541, max_new_tokens: 160}]"
# the held-out headlines scored by the trading table, for runs trained on any reward (FinSMART's pair)
MARKET_SET = "eval.sets=[{name: market, data: market_news, reward: outcome_table, correct_threshold: 0.5}]"
# GRPO's batch as the method recipes run it (2 prompts x 4): recipe=default samples 2 x 8 since 2026-12-05
GRPO_2X4 = ["train.num_generations=4", "train.completions_per_step=8"]
ACRL_BAND = ["algorithm.correction.band_low=5e-3", "algorithm.correction.band_high=2e-2"]


@dataclass
class Pair:
    name: str
    title: str
    method: list[str]
    baseline: list[str] | None  # None: the method alone (before -> after is the comparison)
    metrics: list[str]
    eval_keys: list[str] = field(default_factory=lambda: ["eval/accuracy"])
    baseline_label: str = "grpo"
    extra: dict[str, list[str]] = field(default_factory=dict)  # more runs of the table: {label: overrides}


def batch_overrides(steps: int) -> list[str]:
    """The basic_arithmetic batch most pairs share: 4 prompts x 4 completions per step, 50 held-out prompts."""
    return ["train.num_generations=4", "train.completions_per_step=16", "eval.size=50", f"train.steps={steps}"]
