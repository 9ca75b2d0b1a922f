"""dar: Distribution-Aware Reward for LLM regression (seed 004 #15), a group-level reward.

"Jointly evaluates the empirical predictive distribution formed by multiple predictions for the
same input [...] we assign each prediction credit based on its leave-one-out contribution to the
quality of the overall predictive distribution" (seed 004 #15). Per group, over the m parsable
predictions x_1..x_m of the target y::

    CRPS(F, y) = (1/m) sum_i |x_i - y| - (1/(2 m^2)) sum_i sum_j |x_i - x_j|
    S(F)       = -CRPS(F, y) / scale,             S(empty) = 0
    r_i        = S(F) - S(F without x_i)          (leave-one-out contribution)

Choices where the abstract is silent:
- The distribution's score is the CRPS of the empirical distribution (a proper scoring rule:
  lowest for predictions centred on the target with the right spread, the abstract's "well-
  centered and appropriately dispersed"), negated so higher is better, divided by ``scale``
  (the target's units -> unitless; a config field).
- The empty distribution scores 0, so a group of one gets r = -|x - y| / scale.
- A prediction is the last number of the completion (after ``</think>`` with ``strip_think``);
  one without a number is not in the distribution and gets ``unparsable`` (a penalty in reward
  units; its leave-one-out contribution would be 0, which would reward not answering).
- A row whose target has no number is unscorable: ``None`` for its whole group.

Logged: ``crps`` (the group's CRPS in target units), ``spread`` (mean |x_i - x_j|), ``parsable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, column
from rlpost.rewards.group import GroupReward
from rlpost.rewards.math_answer import gold_number, last_number


def crps(xs: list[float], y: float) -> float:
    """CRPS of the empirical distribution of ``xs [m]`` at ``y`` (0 for an empty list)."""
    m = len(xs)
    if m == 0:
        return 0.0
    error = sum(abs(x - y) for x in xs) / m
    spread = sum(abs(a - b) for a in xs for b in xs) / (2 * m * m)
    return error - spread


@REWARDS.register("dar")
class DAR(GroupReward):
    """Each prediction's leave-one-out contribution to the group distribution's (negative) CRPS."""

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the numeric target
        scale: Annotated[float, Range(gt=0)] = 1.0  # CRPS is divided by this (target units -> reward units)
        unparsable: Annotated[float, Range()] = -1.0  # reward of a completion with no number
        strip_think: bool = True  # read the prediction after </think> only

    def __init__(self, cfg: Config):
        if cfg.scale <= 0:
            raise ParamError("scale", f"must be > 0, got {cfg.scale}")
        super().__init__(cfg)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` and their target -> rewards ``[G]``."""
        g = len(completions)
        y = gold_number(column(rows, self.cfg.column, g, "dar")[0])
        if y is None:
            return [None] * g, {}
        preds = [last_number(answer_text(c, self.cfg.strip_think)) for c in completions]
        xs = [p for p in preds if p is not None]
        full = -crps(xs, y) / self.cfg.scale
        rewards: list[float | None] = []
        k = 0
        for p in preds:
            if p is None:
                rewards.append(self.cfg.unparsable)
                continue
            rest = xs[:k] + xs[k + 1 :]
            rewards.append(full - (-crps(rest, y) / self.cfg.scale))
            k += 1
        metrics = {"parsable": len(xs) / g}
        if xs:
            metrics["crps"] = crps(xs, y)
            metrics["spread"] = sum(abs(a - b) for a in xs for b in xs) / (len(xs) ** 2)
        return rewards, metrics
