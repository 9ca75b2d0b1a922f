"""ect: Evaluation-Conditioned Training (seed 000 #3). Each training prompt states, in natural language,
which monitor scores the response and how faithful that feedback is; eval / deployment prompts name
the high-fidelity monitor instead, eliciting the behaviour that monitor would reward::

    train row r:  prompt_r + note(m_r),  m_r = row[monitor_column] or train_monitor
    eval row r:   prompt_r + note(eval_monitor)
    note(m) = template.format(name=m, description=monitors[m].description, fidelity=monitors[m].fidelity)

It works as an add-on to any algorithm: only the prompts change, the reward is the run's own.

Choices where the abstract is silent:
- Monitors are named in the config (``monitors: {name: {description, fidelity}}``), one per feedback
  source; name them after the reward terms they stand for. A row names its monitor through
  ``monitor_column`` (mixed-fidelity data: e.g. rows scored by a cheap check vs. a careful grader);
  rows without one get ``train_monitor``. The reward is not routed by it: pair the column with the
  data's actual scoring (or a reward reading the same column).
- The note goes into a system message by default (``position: system``; appended to an existing
  one), or before / after the user's message (``prefix`` / ``suffix``).
- Eval rows always name ``eval_monitor`` (the deployment condition); ``eval_monitor: null`` keeps the
  train rule instead (to measure the conditioned behaviour itself).
- Each row gains the columns ``monitor`` and ``fidelity`` (``eval.group_by=fidelity`` reports per level).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.transforms.base import TRANSFORMS, Split, Transform, add_note

DEFAULT_MONITORS = {
    "checker": {"description": "an automatic checker that reads only the final number", "fidelity": "low"},
    "expert": {"description": "an expert grader who verifies the whole answer", "fidelity": "high"},
}
DEFAULT_TEMPLATE = "Your response will be evaluated by {description}; this feedback has {fidelity} fidelity."


@TRANSFORMS.register("ect")
class ECT(Transform):
    """Condition each prompt on the fidelity of the monitor that scores it (train) or the best one (eval)."""

    seed = "seed 000 #3"

    @dataclass(frozen=True)
    class Config:
        monitors: dict[str, dict[str, str]] = field(
            default_factory=lambda: dict(DEFAULT_MONITORS)
        )  # name -> {description, fidelity}
        train_monitor: str = "checker"  # monitor named in training prompts whose row names none
        monitor_column: str | None = None  # row column naming the monitor that scores that row (null: none)
        eval_monitor: str | None = "expert"  # the high-fidelity monitor named at eval / deployment (null: train rule)
        template: str = DEFAULT_TEMPLATE  # the note; {name} {description} {fidelity}
        position: Literal["system", "prefix", "suffix"] = "system"  # where the note goes

        def __post_init__(self):
            if not self.monitors:
                raise ValueError("monitors is empty: name at least one monitor")
            for name, spec in self.monitors.items():
                missing = sorted({"description", "fidelity"} - set(spec or {}))
                if missing:
                    raise ValueError(f"monitors.{name} lacks {', '.join(missing)}")
            for key in ("train_monitor", "eval_monitor"):
                value = getattr(self, key)
                if value is not None and value not in self.monitors:
                    raise ValueError(f"{key}={value!r} is not a monitor. Valid choices: {', '.join(self.monitors)}.")
            try:
                self.template.format(name="", description="", fidelity="")
            except (KeyError, IndexError) as err:
                raise ValueError(f"template uses {err}; it may use {{name}} {{description}} {{fidelity}}") from None

    def note(self, monitor: str) -> str:
        spec = self.cfg.monitors[monitor]
        return self.cfg.template.format(name=monitor, description=spec["description"], fidelity=spec["fidelity"])

    def monitor_of(self, row: dict, split: Split, index: int) -> str:
        cfg = self.cfg
        if split == "eval" and cfg.eval_monitor is not None:
            return cfg.eval_monitor
        value = row.get(cfg.monitor_column) if cfg.monitor_column else None
        if value is None or value == "":
            return cfg.train_monitor
        if value not in cfg.monitors:
            raise ConfigError(
                f"{split} row {index}: {cfg.monitor_column}={value!r} is not a monitor of data.transform.monitors "
                f"({', '.join(cfg.monitors)})."
            )
        return str(value)

    def __call__(self, rows: list[dict], split: Split) -> list[dict]:
        """Rows ``[N]`` -> the same rows with the monitor's note in the prompt and monitor/fidelity columns."""
        out: list[dict[str, Any]] = []
        for i, row in enumerate(rows):
            monitor = self.monitor_of(row, split, i)
            prompt = add_note(row["prompt"], self.note(monitor), self.cfg.position)
            out.append(
                {**row, "prompt": prompt, "monitor": monitor, "fidelity": self.cfg.monitors[monitor]["fidelity"]}
            )
        return out
