"""none: TRL's plain sampling, unchanged (the default ``algorithm/rollout``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts


@ROLLOUTS.register("none")
class PlainRollout:
    """TRL's plain sampling: G independent completions per prompt (no strategy)."""

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        return ctx.generate(prompts)
