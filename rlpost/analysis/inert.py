"""Inert components: the activity figures (``active/<kind>/<name>``, rlpost/core/activity.py) that stayed 0 for
a whole run, read from its logged metrics (metrics.jsonl rows), with the reason where it is known.

A figure is inert when it was logged at least once and every logged value is 0. A component that is the plain
GRPO path (group_norm with GRPO's settings, clip at 0.2/0.2, weighted_sum, the ``none`` rollout, selector and
correction) logs no figure, so it is never listed. The reason is the component's own (``Component.inert_reason``,
given by the caller that has the run: rlpost/train.py) or one of the generic ones read from the logs:

- ``frac_reward_zero_std`` = 1 at every step: every group had all-equal rewards, so every GRPO advantage was 0
  and nothing downstream of the rewards (advantage, combine, loss, regularizer, grad, select) had a signal to
  change;
- ``rlpost/varied_reward_columns`` <= 1 at every step (a combine): at most one reward column varied within a
  group, so a combination of several columns had nothing to weigh against each other;
- dynamic sampling never dropped a row: ``frac_reward_zero_std`` = 0 at every step (no group was all-equal);
- the soft overlong penalty never applied: no completion came within ``cache_len`` tokens of the limit.

Used at the end of ``rlpost train`` (summary.json ``inert``, printed) and by ``rlpost report`` (from
summary.json, or from metrics.jsonl for a run without one).
"""

from __future__ import annotations

from typing import Any

PREFIX = "active/"  # rlpost.core.activity.PREFIX (this module is read without torch)
ALL_EQUAL = "every group had all-equal rewards at every step (frac_reward_zero_std = 1 throughout)"
ONE_COLUMN = "at most one reward column varied within a group at any step (rlpost/varied_reward_columns <= 1)"
NO_FLAT_GROUP = "no group had all-equal rewards at any step (frac_reward_zero_std = 0 throughout): nothing to drop"
NEVER_LONG = "no completion came within algorithm.overlong.cache_len tokens of train.max_completion_length"
REWARD_KINDS = ("advantage", "combine", "loss", "regularizer", "grad", "select")  # what an all-equal batch stills


def figures(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Every ``active/`` figure of the rows (metrics.jsonl: training steps; evaluation rows carry none) -> its
    logged values in step order (None values, a step where TRL had no number, left out)."""
    out: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row.items():
            if name.startswith(PREFIX) and value is not None:
                out.setdefault(name, []).append(float(value))
    return out


def _values(rows: list[dict[str, Any]], name: str) -> list[float]:
    return [float(row[name]) for row in rows if row.get(name) is not None]


def generic_reason(name: str, rows: list[dict[str, Any]]) -> str | None:
    """The reason an inert figure ``name`` (``active/<kind>/<component>``) stayed 0, read from the logs alone."""
    kind = name[len(PREFIX) :].split("/", 1)[0]
    zero_std = _values(rows, "frac_reward_zero_std")
    if name == f"{PREFIX}keep/dynamic_sampling":
        return NO_FLAT_GROUP if zero_std and all(v == 0.0 for v in zero_std) else None
    if name == f"{PREFIX}shape/overlong":
        return NEVER_LONG
    if kind in REWARD_KINDS and zero_std and all(v == 1.0 for v in zero_std):
        return ALL_EQUAL
    varied = _values(rows, "rlpost/varied_reward_columns")
    if kind == "combine" and varied and max(varied) <= 1.0:
        return ONE_COLUMN
    return None


def inert_figures(rows: list[dict[str, Any]], reasons: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The inert figures of a run, sorted by name: ``{"figure": active/<kind>/<name>, "component": <kind>/<name>,
    "steps": how many steps logged it, "reason": str or None}``. ``reasons`` (figure -> text): the components' own,
    which come before the generic ones (``generic_reason``)."""
    reasons = reasons or {}
    entries = []
    for name, values in sorted(figures(rows).items()):
        if values and all(v == 0.0 for v in values):
            reason = reasons.get(name) or generic_reason(name, rows)
            entries.append({"figure": name, "component": name[len(PREFIX) :], "steps": len(values), "reason": reason})
    return entries


def inert_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One line per inert component (what ``rlpost train`` prints at the end); none when nothing was inert."""
    return [
        f"inert: {e['component']} (0 at all {e['steps']} steps)" + (f": {e['reason']}" if e.get("reason") else "")
        for e in entries
    ]
