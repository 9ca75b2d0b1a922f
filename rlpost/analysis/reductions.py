"""What ``rlpost compare`` reads from one run for one metric: ``<key>[:<reduction>]`` (``metrics=[...]``).

A run's series of a metric is its ``(step, value)`` points in metrics.jsonl (training rows every step,
held-out rows at step 0, every ``eval.every`` steps and at the end), else summary.json's ``before``
(step 0) and ``after`` (the last step) (rlpost/analysis/sweep.py ``Job.series``). A reduction turns it
into one number per run:

- ``final`` (the default, ``eval/accuracy`` = ``eval/accuracy:final``): the last logged value; for a
  held-out metric the end-of-run evaluation.
- ``last:<k>``: the mean of the last k logged values (all of them when fewer were logged).
- ``mean``, ``max``, ``min``: over every logged value of the run.
- ``first_above:<v>[:<w>]``: the first step at which the trailing mean of w logged values (default 1;
  full windows only, so the earliest is the w-th logged step) is >= v. ``first_below`` is the same with
  <= v. A run that never gets there is *censored*: its value is the step after its last logged step,
  a lower bound on when it would have, and compare counts such runs (``censored``).
- ``gain``: the last logged value minus the first (after minus before). For a held-out metric the
  first is the step-0 evaluation (``eval.at_start=true``, the default); for a training metric, the
  first logged step's value.

The metric key is everything before the first ``:`` (no rlpost metric has one in its name).

Equal compute (``read_at``; compare reads both runs of a seed at the smaller of their totals): the run's
series up to a budget on an x axis (``step``; ``tokens``: TRL's
cumulative ``num_tokens``; ``flops``: cumulative ``train_flops``; ``seconds``: cumulative
``step_time``). Each point's x is the run's x at the point's step (a held-out row takes the x of the
training row of its step; step 0 is x = 0). The points with x <= budget are kept and, when the budget
falls between two logged points, one point is added at the budget, its value (and its step)
linearly interpolated between those two: ``v = v0 + (v1 - v0) * (budget - x0) / (x1 - x0)``. A run
whose last point lies below the budget never reached it: no reading. The reduction is then applied to
that series (``first_above`` and ``first_below`` count steps, so they are read at equal steps only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlpost.analysis.sweep import Job

REDUCTIONS = "final, last:<k>, mean, max, min, first_above:<value>[:<window>], first_below:<value>[:<window>], gain"
THRESHOLDS = ("first_above", "first_below")
X_AXES = {"step": None, "tokens": "num_tokens", "flops": "train_flops", "seconds": "step_time"}


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``metrics``: a metric key and how a run's series becomes one number."""

    text: str  # as written: eval/accuracy:gain
    key: str
    reduction: str = "final"
    k: int = 1  # last:<k>
    threshold: float = 0.0  # first_above / first_below
    window: int = 1

    @property
    def per_prompt(self) -> bool:
        """Readings that the held-out prompts of eval_items.json decompose (the end-of-run value, the gain)."""
        return self.reduction in ("final", "gain")


@dataclass(frozen=True)
class Reading:
    value: float
    censored: bool = False  # first_above / first_below never reached: value is the step after the last


def parse_metric(text: str) -> MetricSpec:
    """``<key>[:<reduction>]`` -> MetricSpec; ValueError with the valid forms on anything else."""
    key, _, rest = str(text).partition(":")
    if not key:
        raise ValueError(f"{text!r} names no metric. Write <key>[:<reduction>], reductions: {REDUCTIONS}.")
    if not rest:
        return MetricSpec(text, key)
    name, *args = rest.split(":")
    bad = ValueError(f"{text!r}: unknown reduction {rest!r}. Valid: {REDUCTIONS}.")
    if name in ("final", "mean", "max", "min", "gain"):
        if args:
            raise bad
        return MetricSpec(text, key, name)
    if name == "last":
        if len(args) != 1 or not args[0].isdigit() or int(args[0]) < 1:
            raise ValueError(f"{text!r}: last:<k> takes a whole number of steps k >= 1, e.g. {key}:last:5.")
        return MetricSpec(text, key, name, k=int(args[0]))
    if name in THRESHOLDS:
        try:
            if len(args) not in (1, 2):
                raise ValueError
            threshold, window = float(args[0]), int(args[1]) if len(args) == 2 else 1
            if not math.isfinite(threshold) or window < 1:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"{text!r}: {name}:<value>[:<window>] takes a number and a whole window >= 1, e.g. {key}:{name}:0.3:3."
            ) from None
        return MetricSpec(text, key, name, threshold=threshold, window=window)
    raise bad


def reduce(points: Sequence[tuple[float, float]], spec: MetricSpec) -> Reading | None:
    """``[(step, value)]`` in logged order -> the run's one number (module docstring); None: nothing to reduce."""
    if not points:
        return None
    values = [v for _, v in points]
    if spec.reduction == "final":
        return Reading(values[-1])
    if spec.reduction == "last":
        tail = values[-spec.k :]
        return Reading(sum(tail) / len(tail))
    if spec.reduction == "mean":
        return Reading(sum(values) / len(values))
    if spec.reduction == "max":
        return Reading(max(values))
    if spec.reduction == "min":
        return Reading(min(values))
    if spec.reduction == "gain":
        return Reading(values[-1] - values[0]) if len(values) > 1 else None
    w = spec.window
    for i in range(w - 1, len(values)):
        rolling = sum(values[i - w + 1 : i + 1]) / w
        if rolling >= spec.threshold if spec.reduction == "first_above" else rolling <= spec.threshold:
            return Reading(points[i][0])
    return Reading(points[-1][0] + 1, censored=True)


def x_by_step(job: Job, x_axis: str) -> dict[int, float]:
    """{step: the run's cumulative x after that step}; step 0 (before training) is 0."""
    column = X_AXES[x_axis]
    out: dict[int, float] = {0: 0.0}
    elapsed = 0.0
    for row in job.rows:
        if not isinstance(row.get("step"), int):
            continue
        step = int(row["step"])
        if column is None:
            out[step] = float(step)
        elif column == "step_time" and _number(row.get("step_time")):
            elapsed += float(row["step_time"])
            out[step] = elapsed
        elif column != "step_time" and _number(row.get(column)):
            out[step] = float(row[column])
    if column is None:  # summary.json's after at the last step, for a run without metrics.jsonl
        last = int(job.summary.get("steps", 0) or 0)
        out.setdefault(last, float(last))
    return out


def final_x(job: Job, x_axis: str) -> float | None:
    """The run's total x: its x at its last step with one (the budget of equal compute); None: none logged."""
    xs = x_by_step(job, x_axis)
    return xs[max(xs)] if max(xs) > 0 else None


def with_x(job: Job, key: str, x_axis: str) -> list[tuple[float, float, float]]:
    """The run's ``(step, x, value)`` points of ``key``; a point whose step has no x is left out."""
    xs = x_by_step(job, x_axis)
    return [(float(step), xs[step], value) for step, value in job.series(key) if step in xs]


def read_at(points: list[tuple[float, float, float]], budget: float) -> tuple[list[tuple[float, float]], bool] | None:
    """``[(step, x, value)]`` -> (the ``(step, value)`` series up to x = budget, whether it is the whole
    series), or None when the run's points never reach the budget (module docstring)."""
    if not points or points[-1][1] < budget:
        return None
    kept = [(s, v) for s, x, v in points if x <= budget]
    if len(kept) == len(points):
        return kept, True
    s1, x1, v1 = points[len(kept)]
    if kept and points[len(kept) - 1][1] < budget:  # strictly between two points: interpolate
        s0, x0, v0 = points[len(kept) - 1]
        t = (budget - x0) / (x1 - x0)
        kept.append((s0 + (s1 - s0) * t, v0 + (v1 - v0) * t))
    elif not kept:  # the budget lies before the first logged point: nothing was read yet
        return None
    return kept, False


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
