"""The reward Protocol and its registry.

A reward is any callable with TRL's reward-function signature::

    reward(prompts: list, completions: list, completion_ids: list, **row_columns) -> list[float | None]

so an existing TRL reward function plugs in unchanged (``reward.terms=[{name: callable,
params: {path: my_pkg.my_reward}}]``). A registered rlpost reward is a class with a nested
``Config``; an instance is such a callable. ``None`` means "not applicable to this sample".
"""

from __future__ import annotations

from typing import Any, Protocol

from rlpost.registry import Registry


class Reward(Protocol):
    Config: type

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]: ...


REWARDS: Registry[Reward] = Registry("reward")


def completion_text(completion: Any) -> str:
    """The assistant text of a completion, conversational (list of messages) or plain string."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant")
    return str(completion)
