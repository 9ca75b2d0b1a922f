"""Statistics for comparing methods across seeds: the interquartile mean, a bootstrap confidence interval,
and exact paired tests on per-item results (``rlpost compare``, rlpost/analysis/compare.py).

- ``iqm(x)``: the mean of the middle 50% of the sorted values, with fractional weights at the cut
  points when 25% of n is not a whole number (the trimmed-mean definition of Agarwal et al. 2021,
  "Deep RL at the edge of the statistical precipice": robust to an outlier seed, less noisy than the
  median). n = 1 gives the value itself.
- ``bootstrap_ci(x, statistic, level, resamples, seed)``: the percentile bootstrap, resampling the
  seeds with replacement ``resamples`` times from ``numpy.random.default_rng(seed)``; the interval is
  the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (numpy's linear interpolation) of the
  resampled statistic. Deterministic for a fixed seed. With one value the interval is that value.
- ``mcnemar_exact(a, b)``: two methods' 0/1 results on the same items; only the discordant items
  count: b01 (a wrong, b right) and b10. Two-sided exact binomial test of b10 against
  Binomial(b01 + b10, 1/2): ``p = min(1, 2 * P(X <= min(b01, b10)))``; 1.0 when nothing is discordant.
- ``sign_test(a, b)``: the same exact test on the signs of ``a_i - b_i`` for non-binary scores
  (ties dropped), which is McNemar's test when the scores are 0/1.
- ``two_level_bootstrap_ci(groups)``: the interval of a mean over seeds of per-seed means over prompts
  (``groups[s]``: seed s's per-prompt values, here differences arm minus baseline). Each resample draws
  n seeds with replacement from the n, then, for each drawn seed, as many prompts as it has, with
  replacement from its own; the resampled statistic is the mean over the drawn seeds of the mean over
  their drawn prompts. Percentile interval as above. A seed with one prompt, or all prompts equal,
  adds no prompt-level spread: the interval is then the seed-level one.
- ``sd(x)`` is the sample standard deviation (n - 1 in the denominator); ``paired_bootstrap_ci(a, b,
  statistic)`` resamples the pairs (a_i, b_i) together (the seeds two arms share) and takes the
  percentile interval of ``statistic(a*, b*)``, vectorized over the resamples.
- ``verdict(low, high, expect, margin)``: bench/EVIDENCE.md section 1's rule on a 95% interval of a
  difference (arm minus baseline): ``higher``: reproduced when low > 0, opposite when high < 0;
  ``lower``: the mirror; ``equal`` (margin m): reproduced when the interval lies inside [-m, m],
  opposite when it lies wholly outside (low > m or high < -m); ``not_higher``: reproduced when high < m,
  opposite when low > m; ``not_lower``: reproduced when low > -m, opposite when high < -m; null otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def iqm(values: Sequence[float]) -> float:
    """values [n] -> the interquartile mean (module docstring)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if n == 0:
        raise ValueError("iqm of no values")
    lo, hi = 0.25 * n, 0.75 * n  # the middle half as a continuous interval of [0, n]
    weights = np.clip(np.minimum(np.arange(1, n + 1), hi) - np.maximum(np.arange(n), lo), 0.0, None)
    return float((weights * x).sum() / weights.sum())


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = np.mean,
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """values [n] -> (low, high): the percentile bootstrap interval of ``statistic`` (module docstring)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap of no values")
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    draws = x[rng.integers(0, x.size, size=(resamples, x.size))]  # [resamples, n]
    stats = np.array([statistic(row) for row in draws])
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


@dataclass(frozen=True)
class PairedTest:
    """An exact two-sided paired test: how often each method won on an item, and the p-value."""

    name: str  # "mcnemar" (0/1 results) or "sign" (scores)
    a_better: int  # items where a beat b (b10 for McNemar)
    b_better: int  # items where b beat a (b01)
    ties: int
    p_value: float


def _two_sided_binomial(k: int, n: int) -> float:
    """P-value of min(k, n - k) successes or fewer in n fair coin flips, doubled (capped at 1)."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def sign_test(a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """Paired scores a [n], b [n] -> the exact sign test (ties dropped)."""
    if len(a) != len(b):
        raise ValueError(f"paired results of different lengths: {len(a)} and {len(b)}")
    a_better = sum(x > y for x, y in zip(a, b))
    b_better = sum(x < y for x, y in zip(a, b))
    binary = all(v in (0, 1) for v in (*a, *b))
    return PairedTest(
        "mcnemar" if binary else "sign",
        a_better,
        b_better,
        len(a) - a_better - b_better,
        _two_sided_binomial(a_better, a_better + b_better),
    )


def mcnemar_exact(a: Sequence[int], b: Sequence[int]) -> PairedTest:
    """0/1 results a [n], b [n] on the same items -> McNemar's exact test (the sign test of 0/1 pairs)."""
    if any(v not in (0, 1) for v in (*a, *b)):
        raise ValueError("McNemar's test takes 0/1 results; use sign_test for scores")
    return sign_test(a, b)


def two_level_bootstrap_ci(
    groups: Sequence[Sequence[float]], level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """groups [n seeds][m_s prompts] -> (low, high): seeds resampled, then prompts within each drawn seed
    (module docstring)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    arrays = [np.asarray(g, dtype=np.float64) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("bootstrap of no values (a seed without prompts)")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(arrays), size=(resamples, len(arrays)))  # [resamples, n] the drawn seeds
    means = np.empty(picks.shape)  # the mean over each drawn seed's resampled prompts
    for s, values in enumerate(arrays):
        drawn = picks == s
        prompts = rng.integers(0, values.size, size=(int(drawn.sum()), values.size))
        means[drawn] = values[prompts].mean(axis=1)
    low, high = np.quantile(means.mean(axis=1), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def sd(values: Sequence[float]) -> float:
    """The sample standard deviation (n - 1 in the denominator); needs two values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        raise ValueError("a standard deviation needs two values")
    return float(x.std(ddof=1))


def paired_bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Pairs a [n], b [n] resampled together -> the percentile interval of ``statistic(a* [R, n], b* [R, n]) -> [R]``."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size != y.size or x.size == 0:
        raise ValueError(f"paired values of lengths {x.size} and {y.size}")
    rows = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    low, high = np.quantile(statistic(x[rows], y[rows]), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def sd_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[R, n] resampled pairs -> [R]: the SD of a minus the SD of b (each over its row, n - 1)."""
    return a.std(axis=-1, ddof=1) - b.std(axis=-1, ddof=1)


EXPECTATIONS = ("higher", "lower", "equal", "not_higher", "not_lower")
MARGINED = ("equal", "not_higher", "not_lower")  # the claims that need a margin


def verdict(low: float, high: float, expect: str, margin: float | None = None) -> str:
    """A 95% interval of arm minus baseline -> reproduced, opposite or null (module docstring)."""
    if expect == "higher":
        return "reproduced" if low > 0 else "opposite" if high < 0 else "null"
    if expect == "lower":
        return "reproduced" if high < 0 else "opposite" if low > 0 else "null"
    if expect not in MARGINED:
        raise ValueError(f"expect={expect!r}: one of {', '.join(EXPECTATIONS)}")
    if margin is None or margin < 0:
        raise ValueError(f"expect={expect} needs a margin >= 0, got {margin}")
    m = margin
    if expect == "equal":
        return "reproduced" if -m <= low and high <= m else "opposite" if low > m or high < -m else "null"
    if expect == "not_higher":
        return "reproduced" if high < m else "opposite" if low > m else "null"
    return "reproduced" if low > -m else "opposite" if high < -m else "null"  # not_lower
