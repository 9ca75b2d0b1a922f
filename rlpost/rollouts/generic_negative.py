"""generic_negative: CRPO's generic responses as negative baselines (seed 004 #8).

CRPO "utilizes generic responses as negative baselines to prevent the model from reverting to a
common distribution". Here, after TRL samples each group, the last ``count`` rollouts of every
group are replaced by a generic response (the policy did not sample it; it is scored and trained
like any rollout, with a reward that makes it a negative, ``adjust_rewards``)::

    r_generic(g) = min_{j natural in g} r_j - margin          (margin = null: its own scored reward)

so the generic response never ranks above a natural rollout of its group: group normalization
gives it a negative advantage (its likelihood is pushed down) and the natural rollouts are
measured against it.

Choices where the abstract is silent:
- The generic responses are a list of fixed texts (role-agnostic assistant boilerplate by
  default; a recipe sets its own), drawn per group with a seeded generator; replacing keeps the
  group at G rows, so the batch arithmetic of the run is unchanged.
- The reward is set relative to the group (``min - margin``) rather than to a constant, so it is a
  negative whatever the scale of the reward terms; ``margin: null`` leaves the reward terms to score
  it (a plain baseline, negative only if the terms say so).
- A group whose natural rewards are all NaN (unscorable) gives the generic response NaN as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, completion_like

KIND = "generic_negative"
GENERIC = [
    "I'm happy to help with that! Let me know if you have any other questions.",
    "That's a great question. There are many factors to consider, and it depends on the situation.",
    "Sure! Here is a general answer that should cover most cases.",
]


def negative_baseline_rewards(
    rewards: torch.Tensor, generic: torch.Tensor, group_size: int, margin: float
) -> torch.Tensor:
    """rewards [N], generic [N] bool -> rewards [N] with r_generic = min(natural r of its group) - margin."""
    grouped = rewards.view(-1, group_size)
    natural = (~generic).view(-1, group_size) & ~torch.isnan(grouped)
    low = torch.where(natural, grouped, torch.full_like(grouped, float("inf"))).min(dim=1).values  # [N/G]
    low = torch.where(torch.isinf(low), torch.full_like(low, float("nan")), low)
    baseline = (low - margin).repeat_interleave(group_size)  # [N]
    return torch.where(generic, baseline, rewards)


@ROLLOUTS.register("generic_negative")
class GenericNegative(RolloutStrategy):
    """CRPO: a generic response in every group, rewarded below the group's worst natural rollout."""

    reward_adjustment = "relative"  # its group minimum minus a margin, per term too

    @dataclass(frozen=True)
    class Config:
        responses: list[str] = field(default_factory=lambda: list(GENERIC))  # generic responses, one drawn per group
        # generic responses per group (replacing the last rollouts; < train.num_generations)
        count: Annotated[int, Range(ge=1)] = 1
        # r_generic = min natural reward of the group - margin (null: scored by the terms)
        margin: Annotated[float | None, Range(ge=0)] = 1.0

        def __post_init__(self):
            if not self.responses or not all(isinstance(r, str) and r.strip() for r in self.responses):
                raise ValueError("responses must be a non-empty list of non-empty strings")
            if self.count < 1 or (self.margin is not None and self.margin < 0):
                raise ValueError("need count >= 1 and margin >= 0 (or null)")

    def check_run(self, run: Any) -> None:
        g = run.settings.train.num_generations
        if self.cfg.count >= g:
            raise ConfigError(
                f"algorithm.rollout.count={self.cfg.count} must be smaller than train.num_generations={g}: "
                "the group needs sampled rollouts too."
            )

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        out = ctx.generate(prompts)
        for group in ctx.groups(len(out)):
            for i in list(group)[-self.cfg.count :]:
                text = ctx.rng.choice(self.cfg.responses)
                out.force(i, ctx.completion_ids(text), completion_like(text, out.completions[i]), KIND)
        return out

    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        generic = torch.tensor([k == KIND for k in kinds], dtype=torch.bool, device=rewards.device)
        metrics = {"generic_negative/scored_reward_mean": torch.nanmean(rewards[generic]).item()}
        if self.cfg.margin is not None:
            rewards = negative_baseline_rewards(rewards, generic, group_size, self.cfg.margin)
        metrics["generic_negative/reward_mean"] = torch.nanmean(rewards[generic]).item()
        return rewards, metrics
