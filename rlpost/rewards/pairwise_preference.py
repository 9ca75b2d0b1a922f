"""pairwise_preference: the pairwise preference reward of PPR-GDE (seed 004 #18), a group-level reward.

"PPR-GDE does not require scalar rewards [...] it preserves the comparative structure of
subjective evaluation through a pairwise preference reward, mitigates judge position bias via
repeated comparisons with swapped response order" (seed 004 #18). Per group of G completions,
with the debiased preference p(i > j) of preference.py (both orders judged)::

    r_i = mean_{j != i, (i, j) judged} p(i > j)                 in [0, 1]

the completion's expected win rate against its siblings (1/2 = par).

Choices where the abstract is silent:
- Every ordered pair is compared once in each slot order: G (G - 1) judge prompts per group
  (12 for G = 4), all in one judge call; p(j > i) = 1 - p(i > j) is not judged again.
- The reward is the mean preference (a soft win rate), not a count of wins, so a judge's
  confidence carries into the reward.
- A group of one has no opponent and a completion whose every pair failed has no comparison:
  ``None`` (the term does not apply; TRL's NaN).
- Logged: ``position_bias`` = mean over pairs of (s_ab + s_ba)/2 - 1/2, the judge's lean toward
  slot A (0 = none; the swap cancels it in the reward), and the judge counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS
from rlpost.rewards.group import GroupReward
from rlpost.rewards.preference import PAIR_TEMPLATE, PairwiseJudging, make_judge


@REWARDS.register("pairwise_preference")
class PairwisePreference(GroupReward):
    """Mean swapped-order judge preference of a completion over each sibling in its group."""

    @dataclass(frozen=True)
    class Config:
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge backend and its Config
        template: str = PAIR_TEMPLATE  # judge prompt: {question} {response_a} {response_b} {answer_format}
        swap: bool = True  # judge both slot orders and average (position-bias correction)
        strip_think: bool = True  # compare only the text after </think>
        max_response_chars: Annotated[int, Range(ge=1)] = 2000  # responses are cut to this many characters

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.judge = make_judge(cfg.judge, cfg.template)
        self.pairs = PairwiseJudging(self.judge, cfg.template, cfg.swap, cfg.strip_think, cfg.max_response_chars)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> win rates ``[G]`` in [0, 1] (None: nothing judged)."""
        g = len(completions)
        index = [(i, j) for i in range(g) for j in range(i + 1, g)]
        before = dict(self.judge.stats)
        prefs = self.pairs.preferences(prompts[0], [(completions[i], completions[j]) for i, j in index])
        wins: list[list[float]] = [[] for _ in range(g)]
        for (i, j), p in zip(index, prefs):
            if p is not None:
                wins[i].append(p)
                wins[j].append(1.0 - p)
        metrics = self.pairs.stats_delta(before)
        bias = self.pairs.last_bias()
        if bias is not None:
            metrics["position_bias"] = bias
        return [sum(w) / len(w) if w else None for w in wins], metrics
