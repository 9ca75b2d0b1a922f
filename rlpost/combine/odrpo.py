"""``odrpo``: Ordinal Decomposition for Robust Policy Optimization (seed 004 #25).

A discrete score s in {min_score, ..., max_score} (e.g. a 1-10 rubric from an auto-rater) becomes
K - 1 ordinal binary indicators, one per success threshold; each gets its own group advantage, and
the advantages are accumulated::

    b_{i,k} = 1[s_i >= k]                              k = min_score + 1, ..., max_score
    A_{i,k} = (b_{i,k} - mean_g(b_k)) / (std_g(b_k) + eps)   per threshold (GroupNorm, "group")
    A_i     = sum_k A_{i,k}                            ("sum"; "mean" divides by K - 1)

The output is already a group-centred advantage (every A_{.,k} has group mean 0), returned as the
advantage of the combine step (``produces = "advantages"``): the pipeline sends it to the loss in
place of ``algorithm.advantage``, so no group_norm re-standardizes a group and undoes the
per-threshold weighting; stages that would read it as a reward (whitening, overlong or KL shaping,
an absolute rollout rewrite, any other advantage) are refused before a model loads. With a binary score (min 0, max 1) there is one
indicator, b = s, and A is GRPO's group_norm advantage exactly.

Choices where the abstract is silent:
- Each threshold is normalized like GRPO (mean and std of its indicator in the group), the standard
  estimator the abstract compares against; ``scale: none`` centres only (Dr. GRPO per threshold).
  A threshold that every (or no) completion of a group passes has zero std and contributes 0: the
  "variance-aware curriculum" (easy thresholds drop out, the ones the group straddles carry signal).
- "Accumulating" is a plain sum (``reduce: sum``); ``mean`` keeps the scale of one threshold.
- The score is one reward term (``term``) or, with ``term: null``, the weighted sum of all terms.
  Scores need not be integers: 1[s >= k] is defined for any real s; below min_score passes nothing,
  above max_score passes every threshold. A NaN score (unscorable) stays NaN.
- Multi-tier scores come from a term that gives them: ``reward=rubric`` with ``tiers: T`` (the judge's
  1-10 reply, or the tier of the weighted mean, as an integer 1..T; rlpost/rewards/rubric.py), or any
  term whose scores are levels (``callable``, a data column of rater scores).
- Range check, before any model loads: every reward term declares the range its scores lie in
  (``Reward.score_range``: [0, 1] for judged and verifiable scores, [1, T] for a tiered rubric). The
  score's range [lo, hi] (the term's, or with ``term: null`` the weighted sum's, each term's range times
  its weight, with 0 for a skipped term) must contain the levels: ``min_score <= lo`` and
  ``max_score <= hi``; a threshold k <= lo (always passed) or k > hi (never passed) would be dead, and a
  [0, 1] judge score against a 1..10 ladder silently gave zero advantages. A term that declares no range
  (a user's callable) is not checked; at run time a batch in which every scored sample lies below
  ``min_score`` (no threshold can ever pass) raises ``ODRPOScoreError`` instead of training on zeros.
- Metrics: ``odrpo/score_mean``, ``odrpo/active_thresholds`` (mean number of thresholds per group
  whose indicator varies within the group), ``odrpo/in_range_frac`` (scored samples with
  min_score <= s <= max_score), ``odrpo/unscorable_frac``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.advantages.base import nan_weighted_sum, term_index
from rlpost.advantages.group_norm import group_advantage
from rlpost.combine.base import COMBINERS, Combine
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range

MAX_THRESHOLDS = 100  # levels - 1: each threshold is one column of the [N, K] indicator matrix


class ODRPOScoreError(RuntimeError):
    """Every scored sample of a batch lies below ODRPO's min_score: its thresholds see nothing."""


def score_range(funcs: list, weights: list[float], index: int | None) -> tuple[float, float] | None:
    """The range [lo, hi] of ODRPO's score: term ``index``'s declared range, or (``index`` None) the weighted
    sum's: sum_j min(0, w_j lo_j, w_j hi_j) .. sum_j max(0, w_j lo_j, w_j hi_j) (0: a skipped term). None
    when a term it reads declares none."""
    ranges = [f.score_range() for f in funcs]
    if index is not None:
        return ranges[index]
    if any(r is None for r in ranges):
        return None
    lo = sum(min(0.0, w * r[0], w * r[1]) for w, r in zip(weights, ranges) if r is not None)
    hi = sum(max(0.0, w * r[0], w * r[1]) for w, r in zip(weights, ranges) if r is not None)
    return lo, hi


@COMBINERS.register("odrpo")
class ODRPO(Combine):
    """Ordinal decomposition of a discrete score: group advantages per threshold 1[s >= k], summed."""

    produces = "advantages"
    seed = "seed 004 #25"

    @dataclass(frozen=True)
    class Config:
        term: str | None = None  # reward term holding the discrete score; null = weighted sum of all terms
        min_score: Annotated[int, Range()] = 1  # lowest score level
        max_score: Annotated[int, Range()] = 10  # highest score level: thresholds min_score+1 .. max_score
        reduce: Literal["sum", "mean"] = "sum"  # accumulate the per-threshold advantages, or average them
        scale: Literal["group", "none"] = "group"  # per-threshold advantage: divide by the group std, or not
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the std before dividing

        def __post_init__(self) -> None:
            if self.max_score <= self.min_score:
                raise ValueError(f"max_score={self.max_score} must be larger than min_score={self.min_score}")
            if self.max_score - self.min_score > MAX_THRESHOLDS:
                raise ValueError(
                    f"max_score={self.max_score} - min_score={self.min_score} gives more than {MAX_THRESHOLDS} "
                    "thresholds (one advantage column each); a rater's scale has a few levels (1-10, 0-100)"
                )
            if self.reduce not in ("sum", "mean"):
                raise ValueError(f"Unknown reduce {self.reduce!r}. Valid choices: sum, mean.")
            if self.scale not in ("group", "none"):
                raise ValueError(f"Unknown scale {self.scale!r}. Valid choices: group, none.")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.index: int | None = None  # column of cfg.term, set by bind()

    def bind(self, names: list[str]) -> None:
        if self.cfg.term is not None:
            self.index = term_index(names, self.cfg.term, "reward.combine.term")

    def check_run(self, run: Any) -> None:
        self.bind(run.reward.names)
        self.check_range(score_range(run.reward.funcs, run.reward.weights.tolist(), self.index))

    def check_range(self, declared: tuple[float, float] | None) -> None:
        """The levels min_score..max_score lie in the score's declared range [lo, hi] (module docstring)."""
        if declared is None:
            return
        c, (lo, hi) = self.cfg, declared
        what = f"reward term {c.term!r}" if c.term else "the weighted sum of the reward terms"
        dead = [k for k in self.thresholds() if not lo < k <= hi]
        if c.min_score > lo or c.max_score > hi or dead:
            raise ConfigError(
                f"reward.combine: ODRPO's levels min_score={c.min_score}..max_score={c.max_score} (thresholds "
                f"{', '.join(map(str, self.thresholds()))}) do not fit {what}, whose scores lie in [{lo:g}, {hi:g}]"
                + (f": thresholds {', '.join(map(str, dead))} can never vary" if dead else "")
                + f". Set min_score={math.floor(lo)} and max_score <= {math.floor(hi)}, or give the term integer "
                "tiers (reward=rubric: reward.terms.0.params.tiers=10 with judge.mode=scale)."
            )

    def score(self, reward_terms: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """reward_terms [N, R], weights [R] -> the discrete score [N]."""
        if self.cfg.term is None:
            return nan_weighted_sum(reward_terms, weights)
        if self.index is None:
            raise RuntimeError("odrpo: term is set but bind(names) was not called (build_run does it)")
        return reward_terms[:, self.index].float()

    def thresholds(self) -> list[int]:
        return list(range(self.cfg.min_score + 1, self.cfg.max_score + 1))

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """reward_terms [N, R], weights [R], G -> summed per-threshold advantages [N] (NaN = unscorable)."""
        cfg, g = self.cfg, num_generations
        s = self.score(reward_terms, weights)
        nan = torch.isnan(s)
        total = torch.zeros_like(s)
        active = torch.zeros(s.numel() // g, device=s.device)
        for k in self.thresholds():
            passed = (s >= k).float().masked_fill(nan, float("nan"))  # [N]
            total = total + group_advantage(passed, g, cfg.scale, cfg.eps).nan_to_num(0.0)
            grouped = passed.view(-1, g)
            hi = grouped.nan_to_num(-1.0).amax(1)
            lo = grouped.nan_to_num(2.0).amin(1)
            active += (hi > lo).float()  # the indicator varies within the group
        if cfg.reduce == "mean":
            total = total / len(self.thresholds())
        total = total.masked_fill(nan, float("nan"))
        scored = s[~nan]
        if scored.numel() and bool((scored < cfg.min_score).all()):
            raise ODRPOScoreError(
                f"odrpo: every scored sample of this batch lies below min_score={cfg.min_score} (scores "
                f"{float(scored.min()):g}..{float(scored.max()):g}), so no threshold of {cfg.min_score + 1}.."
                f"{cfg.max_score} can pass and every advantage is 0; the score is on another scale than the "
                "levels (a [0, 1] judge against a 1..10 ladder?): give the term tiers or change min/max_score."
            )
        inside = ((scored >= cfg.min_score) & (scored <= cfg.max_score)).float()
        metrics = {
            "odrpo/score_mean": float(scored.mean()) if scored.numel() else 0.0,
            "odrpo/active_thresholds": float(active.mean()),
            "odrpo/in_range_frac": float(inside.mean()) if scored.numel() else 0.0,
            "odrpo/unscorable_frac": float(nan.float().mean()),
        }
        return total, metrics

    def describe(self) -> str:
        c = self.cfg
        return (
            f"A = {c.reduce}_k GRPO advantage of 1[s >= k], k = {c.min_score + 1}..{c.max_score}, "
            f"s = {c.term or 'weighted sum of the terms'} (scale {c.scale})"
        )
