"""env: the episode's reward, as the environment returned it (``data/env``, rlpost/envs/).

The episode runner (rlpost/envs/runner.py) sums each episode's per-turn rewards and hands the sum to
the reward terms as the column ``rlpost_env_reward``; this term returns it, so ``reward.combine``,
whitening and the other terms apply to an episode's reward as to any other. An episode whose
environment raised or timed out has no reward: this term raises for that sample with the
environment's error, and ``reward.on_failure`` decides (skip: NaN, zero: 0.0, abort: stop the run).
"""

from __future__ import annotations

from typing import Any

from rlpost.core.errors import ConfigError
from rlpost.rewards.base import REWARDS, Reward, column


class EnvironmentFailure(RuntimeError):
    """The environment of an episode raised or hung: its reward does not exist."""


@REWARDS.register("env")
class EnvReward(Reward):
    """The environment's episode reward: the sum of its per-turn rewards."""

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        if "rlpost_env_reward" not in kwargs:
            raise ValueError("reward term env reads the episode reward, but these completions come from no environment")
        n = len(completions)
        rewards = column(kwargs, "rlpost_env_reward", n, "env")
        errors = column(kwargs, "rlpost_env_error", n, "env")
        failed = [e for e in errors if e is not None]
        if failed:
            raise EnvironmentFailure(f"{len(failed)} of {n} episodes failed; first: {failed[0]}")
        return [None if r is None else float(r) for r in rewards]

    def is_verifiable(self, env: Any = None) -> bool:
        """An episode's reward checks correctness when its environment does (e.g. calculator's final answer)."""
        return bool(env is not None and env.verifiable)

    def check_run(self, run: Any) -> None:
        if run.env is None:
            raise ConfigError(
                "reward term env scores episodes, but data/env is none: choose an environment (e.g. "
                "data/env=calculator) or another reward."
            )
