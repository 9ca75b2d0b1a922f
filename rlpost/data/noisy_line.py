"""``data=noisy_line``: a synthetic regression task with real uncertainty, for DAR (seed 004 #15), generated from a seed.

DAR is evaluated on "a synthetic task probing interpolation and extrapolation". Each row hides a line
``y = a x + b`` (slope a in ``[-slope_max, slope_max]``, intercept b in ``[-intercept_max, intercept_max]``, one
decimal) and shows ``points`` noisy observations of it, ``y_i = a x_i + b + e_i`` with ``e_i ~ N(0, noise^2)``
at distinct integer ``x_i`` in ``[0, x_max]``; it asks for y at a query x::

    "Noisy measurements of a straight line: (1, 3.4), (3, 7.1), (6, 12.9), (8, 17.2). Predict y at x = 12."

The ``answer`` is the line's own value ``a x_q + b`` (the mean of what a new measurement would read, one decimal),
so no prediction is exactly right and a well-calibrated group spreads around it. ``kind`` says whether the query
lies inside the observed x range (``interpolation``: an integer between two observed x not among them) or beyond
it (``extrapolation``: up to ``x_max // 2`` past the largest observed x), a share ``extrapolate_share`` of the rows;
``eval.group_by=kind`` reports each. The held-out split (seed + 1000003) is other draws minus every training
prompt. Choices: integer x keep the prompt short for a small model; the noise is the same for every row, so the
spread a calibrated predictor should show grows only with the distance from the data (extrapolation).
"""

from __future__ import annotations

import random

QUESTION = "Noisy measurements of a straight line: {points}. Predict y at x = {x}."


def _row(rng: random.Random, points: int, noise: float, x_max: int, extrapolate: bool, slope_max: float,
         intercept_max: float) -> dict:  # fmt: skip
    a = round(rng.uniform(-slope_max, slope_max), 1)
    b = round(rng.uniform(-intercept_max, intercept_max), 1)
    xs = sorted(rng.sample(range(x_max + 1), points))
    inside = [x for x in range(xs[0] + 1, xs[-1]) if x not in xs]
    if extrapolate or not inside:
        query, kind = xs[-1] + rng.randint(1, max(1, x_max // 2)), "extrapolation"
    else:
        query, kind = rng.choice(inside), "interpolation"
    shown = ", ".join(f"({x}, {a * x + b + rng.gauss(0.0, noise):.1f})" for x in xs)
    return {"question": QUESTION.format(points=shown, x=query), "answer": f"{a * query + b:.1f}", "kind": kind}


def noisy_line_rows(
    seed: int,
    size: int,
    points: int = 4,
    noise: float = 1.0,
    x_max: int = 10,
    extrapolate_share: float = 0.5,
    slope_max: float = 3.0,
    intercept_max: float = 5.0,
) -> list[dict]:
    """``size`` rows drawn with ``seed`` (columns: question, answer, kind)."""
    if not 2 <= points <= x_max + 1:
        raise ValueError(f"points must be in 2..x_max + 1 = {x_max + 1}, got {points}")
    if noise < 0 or slope_max < 0 or intercept_max < 0:
        raise ValueError(f"noise, slope_max and intercept_max must be >= 0, got {noise}, {slope_max}, {intercept_max}")
    if not 0.0 <= extrapolate_share <= 1.0:
        raise ValueError(f"extrapolate_share must be in [0, 1], got {extrapolate_share}")
    rng = random.Random(seed)
    return [
        _row(rng, points, noise, x_max, rng.random() < extrapolate_share, slope_max, intercept_max) for _ in range(size)
    ]
