"""none: TRL's plain sampling, unchanged (the default ``algorithm/rollout``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy


@ROLLOUTS.register("none")
class PlainRollout(RolloutStrategy):
    """TRL's plain sampling: G independent completions per prompt (no strategy)."""

    @dataclass(frozen=True)
    class Config:
        pass

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        return ctx.generate(prompts)

    def activity(self, kinds: list[str], before: torch.Tensor, after: torch.Tensor) -> float | None:
        """None: plain sampling is the no-op itself."""
        return None
