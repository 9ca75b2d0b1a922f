"""``none``: no environment (the default ``data/env``): each rollout is one completion of the row's prompt."""

from __future__ import annotations

from typing import Any

from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages


@ENVS.register("none")
class NoEnvironment(Environment):
    """No environment: single-turn completions scored by the reward terms (no episode loop)."""

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        return row_messages(row)

    def step(self, message: str) -> StepResult:
        return StepResult(done=True)

    @property
    def active(self) -> bool:
        return False
