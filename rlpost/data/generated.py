"""``data.source=generated``: the tasks whose rows rlpost generates from a seed, each with the benchmark it
must not overlap. Each generator lives in its own module and is imported on first use."""

from __future__ import annotations

from typing import Any


def _ifeval_train(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.ifeval_train import ifeval_train_rows

    return ifeval_train_rows(seed, size, **params)


def _formula_tasks(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.formula_panel import formula_task_rows

    return formula_task_rows(seed, size, **params)


def _infill(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.infill import infill_rows

    return infill_rows(seed, size, **params)


def _skill_families(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.skill_families import skill_family_rows

    return skill_family_rows(seed, size, **params)


def _persona_arithmetic(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.persona_arithmetic import persona_rows

    return persona_rows(seed, size, **params)


def _unanswerable_arithmetic(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.unanswerable_arithmetic import unanswerable_rows

    return unanswerable_rows(seed, size, **params)


def _noisy_line(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.noisy_line import noisy_line_rows

    return noisy_line_rows(seed, size, **params)


def _ensemble_weights(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.ensemble_weights import ensemble_weight_rows

    return ensemble_weight_rows(seed, size, **params)


def _few_shot_ops(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.few_shot_ops import few_shot_ops_rows

    return few_shot_ops_rows(seed, size, **params)


def _staged_arith(seed: int, size: int, **params) -> list[dict]:
    from rlpost.data.staged_arith import staged_arith_rows

    return staged_arith_rows(seed, size, **params)


# data.source=generated: task -> (rows(seed, size, **data.task_params), the benchmark it must not overlap)
GENERATED: dict[str, tuple[Any, str | None]] = {
    "ifeval_train": (_ifeval_train, "ifeval"),
    "formula_tasks": (_formula_tasks, None),
    "infill": (_infill, None),
    "skill_families": (_skill_families, None),
    "unanswerable_arithmetic": (_unanswerable_arithmetic, None),
    "persona_arithmetic": (_persona_arithmetic, None),
    "noisy_line": (_noisy_line, None),
    "ensemble_weights": (_ensemble_weights, None),
    "few_shot_ops": (_few_shot_ops, None),
    "staged_arith": (_staged_arith, None),
}
# generators called with held_out=True for the held-out split (False for training): their held-out rows come from a
# pool of their own (few_shot_ops: operators never trained on), not only from another seed
HELD_OUT_AWARE = frozenset({"few_shot_ops"})
