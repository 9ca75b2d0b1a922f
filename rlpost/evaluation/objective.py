"""The objective of a search sweep (``hydra/sweeper=search``): what a train job returns to Hydra.

``eval.objective`` names it: a key of the final held-out eval (``eval/accuracy``, ``eval/reward``, ...),
or any training metric, whose last value in metrics.jsonl is returned (e.g. ``reward``). ``auto`` (the
default) is ``eval/accuracy`` when the run has a correctness criterion (rlpost/scoring/correctness.py), else
``eval/reward``: a run judged by a rubric has no accuracy to maximize.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlpost.core.errors import ConfigError
from rlpost.runs.rundir import RunDirectory
from rlpost.scoring.correctness import AUTO, Correctness, no_accuracy_reason

ACCURACY_KEYS = ("eval/accuracy", "eval/accuracy/")  # what only a correctness criterion can report


def resolve_objective(objective: str, correct: Correctness | None, reward_names: Sequence[str]) -> str:
    """``auto`` -> eval/accuracy or eval/reward; an accuracy objective without a criterion is a ConfigError."""
    if objective == AUTO:
        return "eval/accuracy" if correct is not None else "eval/reward"
    if correct is None and (objective == ACCURACY_KEYS[0] or objective.startswith(ACCURACY_KEYS[1])):
        raise ConfigError(
            f"eval.objective={objective} needs a correctness criterion, but {no_accuracy_reason(reward_names)}; "
            "name the term that checks correctness with eval.correct_term=<term>, or use eval.objective=eval/reward."
        )
    return objective


def check_objective(eval_settings) -> None:
    """A search sweep needs every job to return ``eval.objective``: checked before launch."""
    objective = eval_settings.objective
    if objective.startswith("eval/") and not eval_settings.at_end:
        raise ConfigError(
            f"eval.objective={objective} (the search objective) is read from the final held-out eval, but "
            "eval.at_end=false; set eval.at_end=true or name a training metric (e.g. eval.objective=reward)."
        )


def objective_value(summary: dict, objective: str) -> float | None:
    """``objective`` from the final eval (``eval/...``) or its last value in metrics.jsonl. None for an eval
    objective of a run without a final eval (no search sweep lets that start); ConfigError naming the
    metrics the run did log when it never logged ``objective``."""
    if objective.startswith("eval/") and "after" not in summary:
        return None
    rows = (
        [summary.get("after", {})] if objective.startswith("eval/") else RunDirectory(summary["run_dir"]).read_metrics()
    )
    for row in reversed(rows):
        if isinstance(row.get(objective), (int, float)):
            return float(row[objective])
    logged = sorted({k for row in rows for k, v in row.items() if isinstance(v, (int, float)) and k != "step"})
    raise ConfigError(f"eval.objective={objective} was not logged by this run; its metrics are: {', '.join(logged)}")
