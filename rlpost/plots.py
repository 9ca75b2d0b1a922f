"""PNG plots of logged training curves (reward, loss, KL, entropy by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_KEYS = ("reward", "loss", "kl", "entropy", "eval/accuracy")


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
    points = [(r["step"], float(r[key])) for r in rows if isinstance(r.get(key), (int, float)) and "step" in r]
    return [p[0] for p in points], [p[1] for p in points]


def plot_curves(
    runs: dict[str, list[dict[str, Any]]], out_file: Path, keys: tuple[str, ...] = DEFAULT_KEYS, window: int = 1
) -> Path | None:
    """One panel per metric key, one line per run; returns the PNG path (None when nothing to plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = tuple(k for k in keys if any(series(rows, k)[0] for rows in runs.values()))
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for label, rows in runs.items():
            steps, values = series(rows, key)
            if steps:
                ax.plot(steps, smooth(values, window), label=label, marker="o" if len(steps) < 30 else None, ms=3)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if len(runs) > 1:  # one legend for all panels: a panel may hold only some of the runs
        handles = {h.get_label(): h for ax in axes[0] for h in ax.get_lines()}
        fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=min(len(handles), 6), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.88 if len(runs) > 1 else 1))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_file, dpi=110)
    plt.close(fig)
    return out_file
