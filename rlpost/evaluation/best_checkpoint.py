"""``checkpoints/best``: the policy at the held-out evaluation that scored best on ``eval.objective``.

Rule: every evaluation of the trained policy during the run (``eval.every`` steps, and the final one
at ``eval.at_end``) that logs ``eval.objective`` is a candidate; it replaces the kept one when its
value is strictly better (higher for ``eval.objective_mode=max``, lower for ``min``), so a tie keeps
the earlier step. The start-of-run evaluation (step 0, the untrained model) is not a candidate. An
objective that is not an ``eval/...`` key (e.g. ``reward``, a training log) has no held-out value to
follow: no best checkpoint is kept (``check`` says so once). The folder is written by every rank and
renamed into place (rlpost/runs/ranks.py ``write_folder``) with ``rlpost_best.json`` inside
(``{"step", "objective", "value"}``), which a resumed run reads back so the rule continues across a
preemption. ``summary.json``'s ``best`` records the step, the objective, the value and the folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlpost.runs.ranks import is_main, write_folder

RECORD = "rlpost_best.json"


class BestCheckpoint:
    """Keeps ``<checkpoints>/best`` at the best held-out ``objective`` seen so far (module docstring)."""

    def __init__(self, checkpoints: Path, objective: str, mode: str = "max"):
        if mode not in ("max", "min"):
            raise ValueError(f"objective mode must be max or min, got {mode!r}")
        self.folder, self.objective, self.mode = Path(checkpoints) / "best", objective, mode
        self.enabled = objective.startswith("eval/")
        self.record: dict[str, Any] | None = None
        saved = self.folder / RECORD
        if saved.is_file():  # a resumed run: the best so far survives the preemption
            record = json.loads(saved.read_text())
            if record.get("objective") == objective:
                self.record = record

    def better(self, value: float) -> bool:
        if self.record is None:
            return True
        best = float(self.record["value"])
        return value > best if self.mode == "max" else value < best

    def consider(self, step: int, metrics: dict[str, Any], save: Callable[[Path], Any]) -> bool:
        """One evaluation at ``step``: when its objective beats the kept one, ``save(staging)`` writes the
        policy (on every rank) and the folder moves into place. Returns whether it did."""
        value = metrics.get(self.objective)
        if not self.enabled or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if not self.better(float(value)):
            return False
        record = {"step": int(step), "objective": self.objective, "value": float(value)}

        def write(staging: Path) -> Path:
            written = Path(save(staging) or staging)
            if is_main():  # one writer of the record
                (written / RECORD).write_text(json.dumps(record) + "\n")
            return written

        write_folder(self.folder, write)
        self.record = record
        return True

    def summary(self) -> dict[str, Any] | None:
        return {**self.record, "checkpoint": str(self.folder)} if self.record is not None else None
