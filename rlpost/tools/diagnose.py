"""``rlpost diagnose``: will RL help this model on this data? The headroom check of seed 004 #13.

    rlpost diagnose model=smollm2-135m data=basic_arithmetic            # before training
    rlpost diagnose run=<run dir> prompts=64 samples=16                  # before training further

Seed 004 #13 splits RL's impact into a *value-gradient signal* and the *reachable reward headroom*.
On a sample of training prompts, ``samples`` completions each at the rollout temperature:
- reachable headroom = pass@n - pass@1 (unbiased estimator): answers the policy can already reach
  by sampling but does not give first; RL sharpens towards them.
- signal = the within-group reward spread: ``signal_fraction`` is the share of prompts whose group
  rewards are not all equal (a group-relative advantage is zero otherwise), ``reward_std`` its mean.
- value-gradient signal (``gradient_prompts`` > 0, rlpost/analysis/value_gradient.py): on that many prompts
  (``samples`` each), the GRPO policy gradient of the even and of the odd prompts; ``signal`` =
  sqrt(g_1 . g_2) estimates the norm of the expected (value) gradient, ``agreement`` is their cosine,
  ``noise`` the sampling part, and ``entropy`` the mean token entropy (the seed's error control).
  ``thresholds.min_gradient_agreement`` (null: report only) makes a non-agreeing gradient ``weak``.
Verdict, checked in this order (thresholds are config fields):
1. ``saturated``: pass@1 >= max_pass1 (little left to gain);
2. ``out_of_reach``: pass@n < min_pass_at_n (rewards nearly always fail: no signal; easier data,
   SFT first or a denser reward);
3. ``promising``: headroom >= min_headroom and signal_fraction >= min_signal_fraction;
4. ``weak`` otherwise, naming the criterion that failed.
Choices the abstract leaves open: the measures above (the abstract defines no formula), prompts
from the train split by default (what RL will see), the correctness criterion (``correct_term``:
auto = the first verifiable term, rlpost/scoring/correctness.py, scoring at least ``correct_threshold``)
decides pass@k, and the weighted reward gives the spread. A reward without a criterion is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError
from rlpost.tools.policy import PolicySettings, check_policy, describe, load_policy, policy_correctness
from rlpost.tools.runref import apply_run


@dataclass(frozen=True)
class Thresholds:
    max_pass1: float = 0.9
    min_pass_at_n: float = 0.05
    min_headroom: float = 0.1
    min_signal_fraction: float = 0.25
    min_gradient_agreement: float | None = None  # weak when the two halves' gradients agree less (null: report only)


@dataclass(frozen=True)
class DiagnoseSettings(PolicySettings):
    split: Literal["eval", "train"] = "train"
    prompts: int = 32
    samples: int = 8
    thresholds: Thresholds = field(default_factory=Thresholds)
    gradient_prompts: int = 8  # prompts of the value-gradient measurement (even; 0 = skip it)


def verdict(m: dict[str, float], t: Thresholds, n: int) -> tuple[str, list[str]]:
    """(verdict, reasons) from ``diag/*`` metrics of ``n`` samples per prompt."""
    p1, pn = m["diag/pass@1"], m[f"diag/pass@{n}"]
    head, signal = m["diag/headroom"], m["diag/signal_fraction"]
    facts = [
        f"pass@1 = {p1:.3f}, pass@{n} = {pn:.3f}: reachable headroom {head:.3f}",
        f"{signal:.0%} of prompts have unequal rewards within their group (mean reward std {m['diag/reward_std']:.3f})",
    ]
    if p1 >= t.max_pass1:
        return "saturated", [
            f"pass@1 = {p1:.3f} >= max_pass1 = {t.max_pass1}: already solved, little for RL to gain",
            *facts,
        ]
    if pn < t.min_pass_at_n:
        why = f"pass@{n} = {pn:.3f} < min_pass_at_n = {t.min_pass_at_n}: even {n} samples rarely succeed, rewards give no signal"
        return "out_of_reach", [why, *facts, "try easier data, SFT first, or a denser reward"]
    failed = []
    if head < t.min_headroom:
        failed.append(f"headroom {head:.3f} < min_headroom = {t.min_headroom}")
    if signal < t.min_signal_fraction:
        failed.append(f"signal_fraction {signal:.3f} < min_signal_fraction = {t.min_signal_fraction}")
    if "diag/value_gradient_agreement" in m:
        agreement = m["diag/value_gradient_agreement"]
        facts.append(
            f"value-gradient signal {m['diag/value_gradient_signal']:.3g} (noise {m['diag/value_gradient_noise']:.3g}); "
            f"the two halves' policy gradients agree with cosine {agreement:.3f}"
        )
        if t.min_gradient_agreement is not None and agreement < t.min_gradient_agreement:
            failed.append(f"gradient agreement {agreement:.3f} < min_gradient_agreement = {t.min_gradient_agreement}")
    if failed:
        return "weak", [*failed, *facts]
    return "promising", [*facts, "sampling reaches answers the first try misses, and groups carry a learning signal"]


REQUIRED_BY = "rlpost diagnose (pass@1, pass@n, headroom)"


def check(s: DiagnoseSettings, overrides: list[str]) -> DiagnoseSettings:
    reward, _ = check_policy(s, s.prompts, "prompts")
    policy_correctness(s, reward, required_by=REQUIRED_BY)
    if s.samples < 2:
        raise ConfigError(f"samples={s.samples} must be at least 2: a group needs two completions to have a spread.")
    if s.gradient_prompts < 0 or s.gradient_prompts % 2 or s.gradient_prompts == 1:
        raise ConfigError(
            f"gradient_prompts={s.gradient_prompts} must be 0 (skip) or an even number >= 2: the value-gradient "
            "signal compares the gradients of two equal halves."
        )
    t = s.thresholds
    if t.min_gradient_agreement is not None and not -1.0 <= t.min_gradient_agreement <= 1.0:
        raise ConfigError(f"thresholds.min_gradient_agreement={t.min_gradient_agreement} must be in [-1, 1].")
    for key in ("max_pass1", "min_pass_at_n", "min_headroom", "min_signal_fraction"):
        if not 0.0 <= getattr(t, key) <= 1.0:
            raise ConfigError(f"thresholds.{key}={getattr(t, key)} must be in [0, 1].")
    return s


def diagnose(s: DiagnoseSettings) -> dict:
    from transformers import set_seed

    from rlpost.evaluation.evaluate import evaluate_sampled

    reward, dataset = check_policy(s, s.prompts, "prompts")
    set_seed(s.seed)
    model, tokenizer = load_policy(s)
    metrics = evaluate_sampled(
        model,
        tokenizer,
        dataset,
        reward.funcs,
        reward.scored,
        n=s.samples,
        ks=[1],
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        correct=policy_correctness(s, reward, required_by=REQUIRED_BY),
        batch_size=s.batch_size,
        size=s.prompts,
        prefix="diag",
        show_progress=s.progress,
    )
    if s.gradient_prompts:
        metrics.update(value_gradient_metrics(model, tokenizer, dataset, reward, s))
    word, reasons = verdict(metrics, s.thresholds, s.samples)
    return {"verdict": word, "reasons": reasons, "metrics": metrics}


def value_gradient_metrics(model, tokenizer, dataset, reward, s: DiagnoseSettings) -> dict[str, float]:
    """``diag/value_gradient_*`` and ``diag/entropy`` on the first ``gradient_prompts`` prompts (rlpost/analysis/value_gradient.py)."""
    from rlpost.analysis.value_gradient import (
        accumulate_policy_gradient,
        flat_gradient,
        group_advantages,
        split_half_stats,
    )
    from rlpost.envs.runner import ChatRenderer
    from rlpost.evaluation.evaluate import _generate_ids
    from rlpost.scoring.score import score

    rows = [dataset[i] for i in range(min(s.gradient_prompts, len(dataset)))]
    rows = rows[: len(rows) // 2 * 2]
    if not rows:
        return {}
    renderer = ChatRenderer(tokenizer)
    prompts = [
        renderer.prompt_ids(r["prompt"]) if isinstance(r["prompt"], list)
        else tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]
        for r in rows
    ]  # fmt: skip
    model.eval()
    with torch.no_grad():
        samples = [
            _generate_ids(model, tokenizer, [ids] * s.samples, s.max_new_tokens, False, s.temperature)
            for ids in prompts
        ]
    texts = [tokenizer.decode(c, skip_special_tokens=True) for group in samples for c in group]
    rewards = reward.scored(score(rows, texts, s.samples, reward.funcs), s.samples)[0].view(len(rows), s.samples)
    advantages = group_advantages(rewards)
    halves, entropy, tokens = [], 0.0, 0
    for half in (range(0, len(rows), 2), range(1, len(rows), 2)):
        model.zero_grad(set_to_none=True)
        for i in half:
            e, t = accumulate_policy_gradient(
                model, prompts[i], samples[i], advantages[i].tolist(), 1.0 / (len(half) * s.samples)
            )
            entropy, tokens = entropy + e, tokens + t
        halves.append(flat_gradient(model))
    model.zero_grad(set_to_none=True)
    stats = split_half_stats(*halves)
    return {**{f"diag/{k}": v for k, v in stats.items()}, "diag/entropy": entropy / max(tokens, 1)}


def run(s: DiagnoseSettings, output_dir: str, overrides: list[str]) -> int:
    from rlpost.tools.eval import print_table

    result = diagnose(s)
    out = Path(s.out) if s.out else Path(output_dir) / "diagnose.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**describe(s), "overrides": overrides, **result}, indent=2) + "\n")
    print_table(f"{s.model.display_name}: {s.prompts} prompts x {s.samples} samples ({s.split})", result["metrics"])
    print(f"verdict: {result['verdict'].upper()}")
    for reason in result["reasons"]:
        print(f"  - {reason}")
    print(f"results: {out}")
    return 0


APP = tool("diagnose", "diagnose", DiagnoseSettings, check, run, prepare=apply_run)


def main(args: list[str]) -> int:
    return launch(APP, args)
