"""Average ranks: ties share the mean of the ranks they span (what Spearman's rho and rank rewards read)."""

from __future__ import annotations

from collections.abc import Sequence


def average_ranks(values: Sequence[float], descending: bool = False) -> list[float]:
    """Ranks 1..N of ``values [N]`` (rank 1 = smallest, or largest with ``descending``); tied values share the
    mean of their ranks: ``[2, 10, 2]`` -> ``[1.5, 3, 1.5]``."""
    sign = -1.0 if descending else 1.0
    order = sorted(range(len(values)), key=lambda i: sign * values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks
