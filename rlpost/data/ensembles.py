"""The arithmetic of a weighted ensemble of K candidate forecasts (REATS, seed 000 #4): its MSE, the oracle
weights, and the percentage table a router writes and a reward reads.

Shapes: ``forecasts [K][H]`` (candidate k's forecast of the H future steps), ``truth [H]``, ``weights [K]`` on the
simplex (``w_k >= 0``, ``sum_k w_k = 1``)::

    ensemble_h = sum_k w_k forecasts[k][h]
    mse(w)     = (1/H) sum_h (ensemble_h - truth_h)^2

The oracle ensemble (``oracle_weights``) is the exact minimiser of ``mse`` over the simplex, a K-variable convex
quadratic program solved by enumerating supports: on each support S the equality-constrained minimiser comes from
its KKT system, and the best feasible one over all ``2^K - 1`` supports is the optimum (some optimum lies in the
relative interior of a face, where the constraints ``w_k >= 0`` off S are the only active ones). K is small (3 in
``data=ensemble_weights``), so this is exact and cheap. Since ``sum_k w_k = 1``, ``ensemble - truth`` equals
``sum_k w_k (forecasts[k] - truth)``: the system is built on the candidates' errors, not their levels (better
conditioned for series far from 0).

``grid_weights`` is the best table on a percentage lattice (step 10: 66 tables for K = 3), what a router can write
in whole percentages. The table (``format_table`` / ``parse_table``) has one row per candidate, labelled A, B, C::

    A: 40%
    B: 0%
    C: 60%
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

LABELS = "ABCDEFGH"  # candidate k's label in the table
# one table row: a capital label (optionally "(its name)"), ':' '=' or '|', a non-negative percentage
ROW = re.compile(r"(?<![A-Za-z])([A-H])(?:\s*\([^)\n]*\))?\s*[:=|]\s*(\d+(?:\.\d+)?)\s*%")


def ensemble(weights: Sequence[float], forecasts: Sequence[Sequence[float]]) -> list[float]:
    """``weights [K]``, ``forecasts [K][H]`` -> the weighted forecast ``[H]``."""
    return (np.asarray(weights, dtype=float) @ np.asarray(forecasts, dtype=float)).tolist()


def mse(prediction: Sequence[float], truth: Sequence[float]) -> float:
    """Mean squared error of ``prediction [H]`` against ``truth [H]``."""
    diff = np.asarray(prediction, dtype=float) - np.asarray(truth, dtype=float)
    return float(np.mean(diff * diff))


def ensemble_mse(weights: Sequence[float], forecasts: Sequence[Sequence[float]], truth: Sequence[float]) -> float:
    """MSE of the ``weights``-ensemble of ``forecasts [K][H]`` against ``truth [H]``."""
    return mse(ensemble(weights, forecasts), truth)


def oracle_weights(forecasts: Sequence[Sequence[float]], truth: Sequence[float]) -> tuple[list[float], float]:
    """The simplex weights ``[K]`` of least ensemble MSE, and that MSE (exact; see the module docstring)."""
    errors = np.asarray(forecasts, dtype=float) - np.asarray(truth, dtype=float)  # [K, H]
    k, h = errors.shape
    gram = errors @ errors.T / h  # [K, K]: mse(w) = w^T gram w
    best_w, best = np.eye(k)[0], float("inf")
    for size in range(1, k + 1):
        for support in itertools.combinations(range(k), size):
            idx = list(support)
            # KKT of min w_S^T G_S w_S s.t. 1^T w_S = 1: [2 G_S, 1; 1^T, 0] [w_S; lambda] = [0; 1]
            kkt = np.zeros((size + 1, size + 1))
            kkt[:size, :size] = 2 * gram[np.ix_(idx, idx)]
            kkt[:size, size] = kkt[size, :size] = 1.0
            rhs = np.zeros(size + 1)
            rhs[size] = 1.0
            w_s = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:size]
            if (w_s < -1e-9).any():
                continue  # the support's minimiser leaves the simplex: a smaller support holds the optimum
            w = np.zeros(k)
            w[idx] = np.clip(w_s, 0.0, None)
            w /= w.sum()
            value = float(w @ gram @ w)
            if value < best - 1e-12:
                best_w, best = w, value
    return best_w.tolist(), max(best, 0.0)


def grid_weights(forecasts: Sequence[Sequence[float]], truth: Sequence[float], step: int = 10) -> list[int]:
    """The percentages ``[K]`` (multiples of ``step``, summing to 100) of least ensemble MSE; ties: the first in
    lexicographic order."""
    k, units = len(forecasts), 100 // step
    best, best_mse = [100] + [0] * (k - 1), float("inf")
    for cut in itertools.combinations(range(units + k - 1), k - 1):  # stars and bars: the compositions of units
        parts = [b - a - 1 for a, b in zip((-1, *cut), (*cut, units + k - 1))]
        percents = [p * step for p in parts]
        value = ensemble_mse([p / 100 for p in percents], forecasts, truth)
        if value < best_mse - 1e-12:
            best, best_mse = percents, value
    return best


def format_table(percents: Sequence[float]) -> str:
    """``[40, 0, 60]`` -> ``"A: 40%\\nB: 0%\\nC: 60%"``."""
    return "\n".join(f"{LABELS[k]}: {p:g}%" for k, p in enumerate(percents))


def parse_table(text: str, k: int) -> list[float] | None:
    """The weights ``[K]`` a completion's table gives the first ``k`` labels, normalised to sum 1; None when it
    gives none of them a positive percentage. The last row of a label counts; a label with no row weighs 0."""
    found: dict[str, float] = {}
    for match in ROW.finditer(text):
        if LABELS.index(match[1]) < k:
            found[match[1]] = float(match[2])
    raw = [found.get(LABELS[i], 0.0) for i in range(k)]
    total = sum(raw)
    return [r / total for r in raw] if total > 0 else None


def read_matrix(value: Any) -> np.ndarray | None:
    """A column holding numbers (a list, nested lists, or their JSON text) -> a float array; None if unusable."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None
    return array if array.size and np.isfinite(array).all() else None
