"""The environment of a ``data=mixture`` run with episodes: each row's episode is its own source's (rlpost/data/mixture.py).

TRL 1.16's ``rollout_func`` replaces generation for a whole generation batch (it is called once, with every
row's prompt; it cannot be chosen per row), so a mixture in which any source has an environment plays every
row as an episode through one ``SourceEnvironment``. A row of a source with ``env`` plays that environment; a
row of a source without one plays a one-turn episode (``none``: the row's prompt, one completion of at most
``train.max_completion_length`` tokens, done), the completion a run without episodes would sample, with every
token trained. All rows share each turn's batched generation; the runner (rlpost/envs/runner.py) keeps each
slot's own limits (``max_turns``, ``max_total_tokens``, ``step_timeout_s``). The environments of different
sources may differ; their state is saved under ``data.env`` per source.

``env/<metric>`` per step averages over the episodes of the sources that have an environment only
(rlpost/trainer/episodes.py); held-out evaluation plays each source's environment itself
(rlpost/evaluation/held_out.py), so this class is never evaluated on.
"""

from __future__ import annotations

from typing import Any

from rlpost.data.mixture import SOURCE_COLUMN
from rlpost.envs.base import Environment, Message, StepResult
from rlpost.envs.none import NoEnvironment

ONE_TURN = Environment.Config(max_turns=1, max_total_tokens=10**9)  # a source without an environment


class SourceEnvironment(Environment):
    """Episodes of a mixture: each row plays its source's environment (one turn for a source without one)."""

    stateful = True  # the sources' environments' state (a stateful one's, e.g. formula's database)

    def __init__(self, envs: dict[str, Environment | None]):
        super().__init__(Environment.Config())
        self.envs: dict[str, Environment] = {
            name: env if env is not None else NoEnvironment(ONE_TURN) for name, env in envs.items()
        }
        self.episodic = [name for name, env in envs.items() if env is not None]  # sources with an environment
        self.inner: Environment | None = None  # this episode's environment, made at reset

    def fresh(self) -> Environment:
        slot = SourceEnvironment.__new__(SourceEnvironment)
        Environment.__init__(slot, self.cfg)
        slot.envs, slot.episodic, slot.inner = self.envs, self.episodic, None
        slot.evaluating = self.evaluating
        return slot

    def plays(self, row: dict[str, Any]) -> bool:
        """The row's source has an environment (its episode is not a one-turn completion)."""
        return row.get(SOURCE_COLUMN) in self.episodic

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        source = row.get(SOURCE_COLUMN)
        if source not in self.envs:
            raise ValueError(f"row of source {source!r}: the mixture's sources are {', '.join(self.envs)}")
        self.inner = self.envs[source].fresh()
        self.inner.evaluating = self.evaluating
        self.cfg, self.reads_cut_turns = self.inner.cfg, self.inner.reads_cut_turns  # the runner reads both
        return self.inner.reset(row, seed)

    def step(self, message: str) -> StepResult:
        assert self.inner is not None, "step before reset"
        return self.inner.step(message)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()

    def truncated_reward(self) -> float | None:
        return self.inner.truncated_reward() if self.inner is not None else None

    def tools(self) -> list[dict[str, Any]]:
        return self.inner.tools() if self.inner is not None else []

    def metric_names(self) -> list[str]:
        return list(dict.fromkeys(name for s in self.episodic for name in self.envs[s].metric_names()))

    def episode_metrics(self, infos: list[dict[str, Any]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for source in self.episodic:
            for name, value in self.envs[source].episode_metrics(infos).items():
                out[name] = max(out.get(name, 0.0), value)
        return out

    def check_run(self, run: Any) -> None:
        """Nothing here: the builder checked each source's environment against its own reward (rlpost/build.py)."""

    def describe(self) -> str:
        return "episodes by source: " + ", ".join(
            f"{name}={self.envs[name].registry_name if name in self.episodic else 'one turn'}" for name in self.envs
        )

    def episode_lines(self, max_new_tokens: int, on_failure: str) -> list[str]:
        lines = [f"  {self.describe()} (rows of a source without an environment: one completion, all trained)"]
        for source in self.episodic:
            lines += [
                f"  source {source}:",
                *(f"  {line}" for line in self.envs[source].episode_lines(max_new_tokens, on_failure)),
            ]
        return lines

    def state_dict(self) -> dict[str, Any]:
        return {name: env.state_dict() for name, env in self.envs.items() if env.stateful}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, env_state in state.items():
            if name in self.envs:
                self.envs[name].load_state_dict(env_state)
