"""``data=ensemble_weights``: route an ensemble of three forecasters per series (REATS, seed 000 #4), generated
from a seed.

"No single forecasting model consistently dominates across all samples": each row is a synthetic series of
``history`` values from one of three regimes (a ``noise`` scale sets every spread), each won by another candidate
on average:

- ``trend``: ``y_t = level + slope t + e_t``, ``|slope|`` in ``[0.5, 2] noise``, ``e_t ~ N(0, noise^2)``:
  the linear trend (C) extrapolates it;
- ``random_walk``: ``y_t = y_{t-1} + e_t``, ``e_t ~ N(0, (2 noise)^2)``: the last value (A) is the best guess;
- ``noisy_level``: ``y_t = level + e_t``, ``e_t ~ N(0, (2 noise)^2)``: the moving mean (B) averages the noise out.

The candidates forecast the next ``horizon`` steps from the history: A the last value; B the mean of the last
``window`` values; C the least-squares line through the last ``window`` values, extrapolated. The true future
continues the same process. Every number is rounded to one decimal as the prompt shows it, so the reward scores
exactly the forecasts the router saw.

The prompt is REATS's structured hybrid input with a fixed token cost, built by rules (no model): the last
``window`` values, a textual pattern description, numeric features of the history (R^2 and slope of a linear fit,
lag-1 autocorrelation of its residuals, volatility = std of the changes), and the candidates' forecasts::

    Last 6 of 24 values: 104.1, 104.9, 106.2, 107.0, 107.3, 109.0
    Pattern: a strong upward trend; values scatter independently.
    Features: trend R2 0.97, slope 0.99 per step, residual autocorrelation -0.05, volatility 1.4.
    Candidate forecasts of the next 4 values:
    A (last value): 109.0, 109.0, 109.0, 109.0
    ...

Columns: ``question`` (the text above), ``answer`` (the gold percentage table: the best weights on a ``grid``%
lattice by the ensemble MSE on the true future, ``rlpost/data/ensembles.py`` ``grid_weights``), ``solution`` (a
rule-based rationale, then that table: the SFT target, ``rlpost sft target='{solution}'``), ``forecasts`` (JSON
``[3][horizon]``), ``future`` (JSON ``[horizon]``), ``oracle_mse`` (the exact oracle ensemble's MSE), ``regime``
(``eval.group_by=regime``).

Choices where the abstract is silent: three simulated regimes, not real benchmarks; the description is derived from
the features by thresholds (R^2 > 0.8 strong, > 0.4 mild; residual autocorrelation > 0.5 persistent, < 0.2
independent), never from the hidden regime; the rationale names the features and the candidate the gold table
weights most (it reads the future through that table, as REATS's rule-based chain of thought is built from the
oracle's labels); no retrieved similar-sample priors. The held-out split (seed + 1000003) is other draws minus
every training prompt.
"""

from __future__ import annotations

import json
import random

import numpy as np

from rlpost.data.ensembles import LABELS, format_table, grid_weights, oracle_weights

REGIMES = ("trend", "random_walk", "noisy_level")
NAMES = ("last value", "moving mean", "linear trend")  # candidates A, B, C
LEVEL = 100.0  # the series' starting level (positive values, as most forecasting targets)


def _series(rng: random.Random, regime: str, length: int, noise: float) -> list[float]:
    if regime == "trend":
        slope = rng.choice((-1, 1)) * rng.uniform(0.5, 2.0) * noise
        return [LEVEL + slope * t + rng.gauss(0.0, noise) for t in range(length)]
    if regime == "random_walk":
        values = [LEVEL]
        for _ in range(length - 1):
            values.append(values[-1] + rng.gauss(0.0, 2 * noise))
        return values
    return [LEVEL + rng.gauss(0.0, 2 * noise) for _ in range(length)]


def _line(values: list[float]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``values`` against t = 0..n-1."""
    t: np.ndarray = np.arange(len(values), dtype=float)
    slope, intercept = np.polyfit(t, np.asarray(values), 1)
    return float(slope), float(intercept)


def candidates(history: list[float], horizon: int, window: int) -> list[list[float]]:
    """``[3][horizon]``: last value, moving mean of the last ``window``, their least-squares line extrapolated."""
    recent = history[-window:]
    slope, intercept = _line(recent)
    trend = [intercept + slope * (window - 1 + h) for h in range(1, horizon + 1)]
    return [[history[-1]] * horizon, [sum(recent) / window] * horizon, trend]


def features(history: list[float]) -> dict[str, float]:
    """R^2 and slope of a line through the whole history, lag-1 autocorrelation of its residuals, std of changes."""
    y = np.asarray(history)
    slope, intercept = _line(history)
    residual = y - (intercept + slope * np.arange(len(y)))
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / total if total > 0 else 0.0
    centred = residual - residual.mean()
    denominator = float((centred**2).sum())
    # residuals at rounding level (a series on its line) have no autocorrelation to speak of
    autocorr = float((centred[1:] * centred[:-1]).sum()) / denominator if denominator > 1e-12 * max(total, 1.0) else 0.0
    return {"r2": r2, "slope": slope, "autocorr": autocorr, "volatility": float(np.std(np.diff(y)))}


def describe(f: dict[str, float]) -> str:
    """The rule-based pattern description of ``features``."""
    direction = "upward" if f["slope"] > 0 else "downward"
    trend = (
        f"a strong {direction} trend"
        if f["r2"] > 0.8
        else f"a mild {direction} trend"
        if f["r2"] > 0.4
        else "no clear trend"
    )
    if f["autocorr"] > 0.5:
        memory = "the level wanders and its changes persist"
    elif f["autocorr"] < 0.2:
        memory = "values scatter independently"
    else:
        memory = "deviations persist a little"
    return f"{trend}; {memory}"


def rationale(f: dict[str, float], percents: list[int]) -> str:
    """One line naming the features the rules read and the candidate the table weights most."""
    lead = max(range(len(percents)), key=lambda k: percents[k])
    return (
        f"Trend R2 {f['r2']:.2f}, residual autocorrelation {f['autocorr']:.2f}: "
        f"weight {LABELS[lead]} ({NAMES[lead]}) most."
    )


def _row(rng: random.Random, regime: str, history_len: int, horizon: int, window: int, noise: float, grid: int):
    values = [round(v, 1) for v in _series(rng, regime, history_len + horizon, noise)]
    history, future = values[:history_len], values[history_len:]
    forecasts = [[round(v, 1) for v in c] for c in candidates(history, horizon, window)]
    f = features(history)
    percents = grid_weights(forecasts, future, grid)
    table = format_table(percents)
    shown = ", ".join(f"{v:.1f}" for v in history[-window:])
    lines = [
        f"Last {window} of {history_len} values: {shown}",
        f"Pattern: {describe(f)}.",
        f"Features: trend R2 {f['r2']:.2f}, slope {f['slope']:.2f} per step, residual autocorrelation "
        f"{f['autocorr']:.2f}, volatility {f['volatility']:.1f}.",
        f"Candidate forecasts of the next {horizon} values:",
        *(f"{LABELS[k]} ({NAMES[k]}): {', '.join(f'{v:.1f}' for v in c)}" for k, c in enumerate(forecasts)),
    ]
    return {
        "question": "\n".join(lines),
        "answer": table,
        "solution": f"{rationale(f, percents)}\n{table}",
        "forecasts": json.dumps(forecasts),
        "future": json.dumps(future),
        "oracle_mse": round(oracle_weights(forecasts, future)[1], 6),
        "regime": regime,
    }


def ensemble_weight_rows(
    seed: int,
    size: int,
    history: int = 24,
    horizon: int = 4,
    window: int = 6,
    noise: float = 1.0,
    grid: int = 10,
    regimes: list[str] | tuple[str, ...] = REGIMES,
) -> list[dict]:
    """``size`` rows drawn with ``seed``, the regimes in turn from a seeded shuffle (columns: module docstring)."""
    if not 2 <= window <= history:
        raise ValueError(f"window must be in 2..history = {history}, got {window}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if noise <= 0:
        raise ValueError(f"noise must be > 0, got {noise}")
    if grid < 1 or 100 % grid:
        raise ValueError(f"grid must divide 100 (e.g. 5, 10, 20), got {grid}")
    unknown = [r for r in regimes if r not in REGIMES]
    if not regimes or unknown:
        raise ValueError(f"regimes must be a non-empty list of {', '.join(REGIMES)}, got {list(regimes)}")
    rng = random.Random(seed)
    order = [regimes[i % len(regimes)] for i in range(size)]
    rng.shuffle(order)
    return [_row(rng, regime, history, horizon, window, noise, grid) for regime in order]
