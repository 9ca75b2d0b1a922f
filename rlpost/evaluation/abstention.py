"""Held-out abstention metrics: precision, recall and F1 of abstaining (seed 004 #7's evaluation).

A reward term that scores abstention declares it (``Reward.abstention``: per sample, whether the
completion abstained and whether the row is unanswerable, i.e. abstaining is right); today
``ternary_abstention``. With such a term among the reward functions, ``evaluate`` (rlpost ``eval``,
the run's held-out split and every ``eval.sets`` set) reports, with "should abstain" as the positive
class (AbstentionBench's reading)::

    precision = |abstained and unanswerable| / |abstained|
    recall    = |abstained and unanswerable| / |unanswerable|
    f1        = 2 precision recall / (precision + recall)

as ``<prefix>/abstention/{precision,recall,f1,rate}`` (rate: the share of samples that abstained)
and ``<prefix>/abstention/unanswerable`` (the share of unanswerable rows). Choices: an empty
denominator gives 0 (scikit-learn's ``zero_division=0``), so a policy that never abstains scores
precision 0, recall 0, F1 0; a sample whose row cannot say (None) is left out; the first term that
declares abstention is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlpost.rewards.base import Reward


def abstention_scores(abstained: Sequence[bool], should: Sequence[bool]) -> dict[str, float]:
    """Per sample abstained ``[N]`` and should-have-abstained ``[N]`` -> precision, recall, f1, rate, unanswerable."""
    n = len(abstained)
    hits = sum(a and s for a, s in zip(abstained, should))
    n_abstained, n_should = sum(abstained), sum(should)
    precision = hits / n_abstained if n_abstained else 0.0
    recall = hits / n_should if n_should else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "rate": n_abstained / n if n else 0.0,
        "unanswerable": n_should / n if n else 0.0,
    }


def abstention_term(funcs: Sequence[Any]) -> Reward | None:
    """The first reward function that declares abstention (a guarded one is unwrapped); None when none does."""
    for func in funcs:
        func = getattr(func, "func", func)  # rlpost/scoring/guard.py's GuardedReward
        if isinstance(func, Reward) and type(func).abstention is not Reward.abstention:
            return func
    return None


def abstention_metrics(
    funcs: Sequence[Any], completions: list, columns: dict[str, list], prefix: str
) -> dict[str, float]:
    """``<prefix>/abstention/*`` for ``completions`` [N] and the rows' ``columns`` (each [N]); {} without a term
    that declares abstention."""
    term = abstention_term(funcs)
    labels = term.abstention(completions, **columns) if term is not None else None
    if labels is None:
        return {}
    known = [label for label in labels if label is not None]
    scores = abstention_scores([a for a, _ in known], [s for _, s in known])
    return {f"{prefix}/abstention/{name}": value for name, value in scores.items()}
