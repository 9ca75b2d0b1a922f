"""PNG plots of logged metrics (metrics.jsonl): one panel per metric, one line per run.

Used at the end of every run (``plots/training.png``), at the end of a multirun (``plots/sweep.png``,
one line per job) and by ``rlpost plot``. Keys are exact metric names or shell patterns
(``rewards/*``); an empty key list plots every numeric metric. Smoothing is a trailing moving
average over ``window`` logged points (1 = raw).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

from rlpost.runs.ranks import is_main

DEFAULT_KEYS = ("reward", "loss", "kl", "entropy", "eval/accuracy")
SKIP_KEYS = ("step", "epoch")


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points (window 1 = raw)."""
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [
        (r["step"], float(r[key]))
        for r in rows
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and "step" in r
    ]
    return [p[0] for p in points], [p[1] for p in points]


def expand_keys(runs: dict[str, list[dict[str, Any]]], keys: tuple[str, ...]) -> tuple[str, ...]:
    """The metric names to plot: patterns expanded in first-seen order; () = every numeric metric."""
    seen = list(
        dict.fromkeys(
            k
            for rows in runs.values()
            for r in rows
            for k, v in r.items()
            if k not in SKIP_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
        )
    )
    if not keys:
        return tuple(seen)
    out: list[str] = []
    for key in keys:
        out += [k for k in (fnmatch.filter(seen, key) if any(c in key for c in "*?[") else [key]) if k not in out]
    return tuple(k for k in out if any(series(rows, k)[0] for rows in runs.values()))


def make_figure(runs: dict[str, list[dict[str, Any]]], keys: tuple[str, ...] = DEFAULT_KEYS, window: int = 1):
    """A matplotlib Figure (one panel per metric, one line per run), or None when nothing matches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = expand_keys(runs, keys)
    if not keys:
        return None
    cols = min(len(keys), 4)
    rows_n = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(4 * cols, 3.2 * rows_n), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for label, rows in runs.items():
            steps, values = series(rows, key)
            if steps:
                ax.plot(steps, smooth(values, window), label=label, marker="o" if len(steps) < 30 else None, ms=3)
        ax.set_title(key + (f" (smoothed {window})" if window > 1 else ""), fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_visible(False)
    if len(runs) > 1:  # one legend for all panels: a panel may hold only some of the runs
        handles = {h.get_label(): h for ax in axes.flat for h in ax.get_lines()}
        fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=min(len(handles), 4), fontsize=8)
    legend_rows = (len(runs) + 3) // 4 if len(runs) > 1 else 0
    fig.tight_layout(rect=(0, 0, 1, 1 - min(0.4, 0.07 * legend_rows / rows_n)))
    return fig


def plot_curves(
    runs: dict[str, list[dict[str, Any]]], out_file: Path, keys: tuple[str, ...] = DEFAULT_KEYS, window: int = 1
) -> Path | None:
    """One panel per metric key, one line per run; returns the PNG path (None when nothing to plot).

    Written by the main process only (rlpost/runs/ranks.py; other ranks get None), to a temp file renamed
    into place, so a reader or a kill never sees half a PNG."""

    if not is_main():
        return None
    fig = make_figure(runs, keys, window)
    if fig is None:
        return None
    return save_figure(fig, out_file)


def save_figure(fig: Any, out_file: Path) -> Path:
    """``fig`` as a PNG at ``out_file``: written to a temp file renamed into place (a reader or a kill never
    sees half a PNG), then closed."""
    import matplotlib.pyplot as plt

    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_name(f".{out_file.stem}.{os.getpid()}.tmp{out_file.suffix}")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, out_file)
    finally:
        tmp.unlink(missing_ok=True)
        plt.close(fig)
    return out_file
