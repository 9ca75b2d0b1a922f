"""Calibration of sampled numeric predictions: CRPS, central-interval coverage, ranking (seed 004 #15).

DAR's claim is that a group of predictions, read as a predictive distribution, becomes "better-calibrated
[...] while consistently reducing prediction error and improving ranking quality". With
``eval.calibration=<column>`` (the data column of each row's numeric target, e.g. ``answer``) and
``eval.samples = n >= 2``, the n sampled completions of a prompt are its predictive distribution: each
sample's prediction is its last number (rlpost/rewards/math_answer.py, after ``</think>``). Over the P
prompts with a numeric target and at least one prediction::

    crps      = mean_p CRPS(F_p, y_p)      CRPS(F, y) = (1/m) sum_i |x_i - y| - (1/(2 m^2)) sum_ij |x_i - x_j|
    mae       = mean_p |median(F_p) - y_p|
    coverage  = mean_p [q_lo(F_p) <= y_p <= q_hi(F_p)]      lo, hi = (1 - level) / 2, (1 + level) / 2
    width     = mean_p (q_hi(F_p) - q_lo(F_p))
    rank_corr = Spearman correlation of median(F_p) and y_p across prompts (average ranks for ties)
    parsable  = |samples with a number| / |samples|

as ``<prefix>/calibration/<name>``. Choices where the abstract is silent: the CRPS is the one DAR's reward
uses (rlpost/rewards/dar.py), in target units, so a run's reward and its held-out calibration read the same
quantity; quantiles interpolate linearly between order statistics (numpy's default, type 7); the interval's
``level`` is a config field (``eval.calibration_level``, default 0.8); a sample without a number is not
in the distribution (``parsable`` reports how many were); the rank correlation is NaN when fewer than two
prompts are scored or either side is constant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlpost.core.ranks import average_ranks
from rlpost.rewards.dar import crps


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q``-quantile of ``xs`` [m >= 1], linear between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(s) - 1)
    return s[low] + (s[high] - s[low]) * (pos - low)


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of ``a`` and ``b`` [P] (Pearson on average ranks); NaN if undefined."""
    if len(a) < 2:
        return float("nan")
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var_a, var_b = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(var_a * var_b) if var_a and var_b else float("nan")


def calibration_scores(
    predictions: Sequence[Sequence[float | None]], targets: Sequence[float | None], level: float = 0.8
) -> dict[str, float]:
    """Per prompt its samples' predictions ``[P][n]`` (None: no number) and target ``[P]`` (None: none) ->
    crps, mae, coverage, width, rank_corr, parsable and prompts (the count scored); NaN means when none is."""
    lo, hi = (1 - level) / 2, (1 + level) / 2
    rows = []  # (predictions, target) of each scored prompt
    samples = parsed = 0
    for preds, target in zip(predictions, targets, strict=True):
        if target is None:
            continue
        xs = [x for x in preds if x is not None]
        samples, parsed = samples + len(preds), parsed + len(xs)
        if xs:
            rows.append((xs, target))
    nan = float("nan")
    if not rows:
        return {"crps": nan, "mae": nan, "coverage": nan, "width": nan, "rank_corr": nan,
                "parsable": parsed / samples if samples else nan, "prompts": 0.0}  # fmt: skip
    medians = [quantile(xs, 0.5) for xs, _ in rows]
    bounds = [(quantile(xs, lo), quantile(xs, hi)) for xs, _ in rows]
    p = len(rows)
    return {
        "crps": sum(crps(xs, y) for xs, y in rows) / p,
        "mae": sum(abs(m - y) for m, (_, y) in zip(medians, rows)) / p,
        "coverage": sum(a <= y <= b for (a, b), (_, y) in zip(bounds, rows)) / p,
        "width": sum(b - a for a, b in bounds) / p,
        "rank_corr": spearman(medians, [y for _, y in rows]),
        "parsable": parsed / samples,
        "prompts": float(p),
    }
