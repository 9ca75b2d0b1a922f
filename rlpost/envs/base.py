"""The environment contract: an environment owns one episode (issue 18).

    messages = env.reset(row)                     # the first messages (system / user), from a data row
    while not done:
        assistant = policy(messages)              # one assistant turn, sampled by the trainer
        result = env.step(assistant)              # observations, an optional per-turn reward, done, info
        messages += [assistant, *result.observations]

A group is G episodes from the same row. Only the assistant's tokens are trained (episode.py builds the
mask); observations and the environment's messages are context. The episode ends when ``step`` says
``done``, after ``max_turns`` assistant turns, or when the episode's tokens reach ``max_total_tokens``
(the trainer counts them; the environment never sees token ids).

Choices where the issue is silent: messages are TRL's conversational dicts (``{"role", "content"}``);
observations come back as ``role="tool"`` for a tool's output and ``role="user"`` for a simulated user;
an environment is stateful for one episode and is made fresh (``reset``) for each, so one object per
episode slot is enough and nothing leaks between episodes; its randomness comes from the ``seed``
given to ``reset`` (the trainer derives it from the run seed, step and slot), so a resumed run
replays the same episodes without checkpointing a generator.

Where it will sit (decided, not built): ``data/env=<name>`` beside ``data/transform``, not a sixth
top-level group. An environment is a property of the task: it starts from a data row and defines what an
episode of that row is, and the same data with another environment is another task; the episode's
reward reaches the run through the reward group (a reward term that reads what the environment
returned), so ``reward.combine`` and whitening apply as for any term; and the algorithm group stays
about the update (advantages default to trajectory-level GRPO over the G episodes of a row).

Status: the contract, the tag protocol (tags.py), the calculator (calculator.py) and the episode mask
(episode.py) exist with tests; the trainer's episode loop, the ``env`` config group and the other
bundled environments do not yet (issue 18 stays open).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.schema import Range

Message = dict[str, str]  # {"role": "system" | "user" | "assistant" | "tool", "content": str}


@dataclass(frozen=True)
class EpisodeSettings:
    """Limits of every episode, whatever the environment."""

    max_turns: Annotated[int, Range(ge=1)] = 4  # assistant turns per episode
    max_total_tokens: Annotated[int, Range(ge=1)] = 1024  # prompt + every turn + observations
    step_timeout_s: Annotated[float, Range(gt=0)] = 10.0  # one env.step (a tool call, a user reply)


@dataclass
class StepResult:
    """What ``Environment.step`` returns for one assistant message."""

    observations: list[Message] = field(default_factory=list)  # appended after the assistant's turn
    reward: float | None = None  # a per-turn reward, or None (the episode's reward arrives at the end)
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # e.g. {"tool_calls": 1, "tool_errors": 0}


class Environment(ABC):
    """Base of every environment: ``reset`` starts an episode from a data row, ``step`` answers a turn."""

    @abstractmethod
    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        """The episode's first messages for data row ``row`` (its ``prompt`` column and the rest)."""

    @abstractmethod
    def step(self, message: str) -> StepResult:
        """React to one assistant message (its text); the episode ends when ``done`` is true."""

    def describe(self) -> str:
        """One line for ``rlpost show``: who speaks, when rewards arrive."""
        return type(self).__name__
