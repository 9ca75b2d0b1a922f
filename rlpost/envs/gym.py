"""gym: an adapter for Gymnasium-style text environments (``reset`` -> (obs, info), ``step`` -> 5-tuple).

    rlpost train data/env=gym data.env.path=my_games:Wordle reward=env

The class at ``path`` follows Gymnasium's API with text observations and text actions:
``reset(seed=..., options=...) -> (observation, info)`` and ``step(action) -> (observation, reward,
terminated, truncated, info)``; ``gymnasium`` itself is not needed (a ``gymnasium.Env`` subclass works
as is). Choices where Gymnasium has no text convention: the data row is passed as ``options={"row":
row}`` (an environment that owns its data ignores it); the first observation becomes the user
message, after the row's system message when it has one, or after ``system_prompt``; every later
observation is a user message; the reward of each step is that turn's reward (the episode's reward is
their sum, as for every environment); ``terminated or truncated`` ends the episode; a non-string
observation is shown with ``str()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlpost.envs.base import ENVS, Environment, Message, StepResult
from rlpost.envs.callable import check_kwargs, load_env_class


@dataclass(frozen=True)
class GymConfig(Environment.Config):
    """The episode limits, the Gymnasium-style class and how its first observation is introduced."""

    path: str = ""  # pkg.module:Class, a Gymnasium-style environment with text observations and actions
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the class for every episode
    system_prompt: str | None = None  # a system message before the first observation (null: the row's, or none)


@ENVS.register("gym")
class GymEnv(Environment):
    """A Gymnasium-style text environment: observations are user messages, step rewards are turn rewards."""

    Config = GymConfig
    cfg: GymConfig

    def __init__(self, cfg: GymConfig):
        super().__init__(cfg)
        self.cls = load_env_class(cfg.path, "games:Wordle")
        check_kwargs(self.cls, cfg.kwargs, cfg.path)  # before any model loads
        self.inner: Any = None

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        if self.inner is None:
            self.inner = self.cls(**self.cfg.kwargs)
        observation, _info = self.inner.reset(seed=seed, options={"row": row})
        prompt = row.get("prompt")
        system = [m for m in prompt if m.get("role") == "system"] if isinstance(prompt, list) else []
        if self.cfg.system_prompt is not None:
            system = [{"role": "system", "content": self.cfg.system_prompt}]
        return [*system, {"role": "user", "content": str(observation)}]

    def step(self, message: str) -> StepResult:
        observation, reward, terminated, truncated, info = self.inner.step(message)
        done = bool(terminated or truncated)
        observations = [] if done else [{"role": "user", "content": str(observation)}]
        return StepResult(observations, None if reward is None else float(reward), done, dict(info or {}))

    def describe(self) -> str:
        return f"gym {self.cfg.path}: observations are user messages, each step's reward is that turn's reward"
