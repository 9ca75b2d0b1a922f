"""Held-out invariance metrics over variants of one question: group accuracy and consistency (seed 004 #14).

AIR's claim is about questions asked in several forms (an intent's multiple-choice anchor and its open
variants): "boosting in-distribution group accuracy [...] and out-of-distribution consistency". With
``eval.variants_of=<column>`` (a data column naming the question a row is a variant of, e.g. AIR's
``intent_id``) the evaluation also reports, over the groups of rows that share that column's value::

    group_accuracy = |groups whose every scored variant is correct| / |groups with a scored variant|
    consistency    = |groups whose scored variants all agree|       / |groups with >= 2 scored variants|
    groups         = |groups with a scored variant|

as ``<prefix>/variants/{group_accuracy,consistency,groups}``. Choices where the abstract is silent:
agreement is agreement of the correctness verdicts (all right or all wrong: the behaviour depends on the
intent, not the wording), the reading that needs no judge of its own; an unscorable variant (None) is
left out of its group; a group with a single scored variant agrees trivially, so it counts for group
accuracy but not for consistency. A group is cut where ``eval.size`` cuts the split: keep whole groups
together in the data (AIR's rows are intent-major).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def variant_scores(correct: Sequence[bool | None], groups: Sequence[Hashable]) -> dict[str, float]:
    """Per row the correctness verdict ``[N]`` (None: unscored) and its group key ``[N]`` -> group_accuracy,
    consistency (NaN when no group has two scored variants) and groups (the count of groups with a scored row)."""
    verdicts: dict[Hashable, list[bool]] = {}
    for verdict, key in zip(correct, groups, strict=True):
        if verdict is not None:
            verdicts.setdefault(key, []).append(bool(verdict))
    if not verdicts:
        return {"group_accuracy": float("nan"), "consistency": float("nan"), "groups": 0.0}
    several = [v for v in verdicts.values() if len(v) >= 2]
    return {
        "group_accuracy": sum(all(v) for v in verdicts.values()) / len(verdicts),
        "consistency": sum(len(set(v)) == 1 for v in several) / len(several) if several else float("nan"),
        "groups": float(len(verdicts)),
    }


def variant_metrics(correct: Sequence[bool | None], groups: Sequence[Hashable], prefix: str) -> dict[str, float]:
    """``variant_scores`` as ``<prefix>/variants/<name>``."""
    return {f"{prefix}/variants/{name}": value for name, value in variant_scores(correct, groups).items()}
