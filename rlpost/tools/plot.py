"""``rlpost plot``: PNG curves of logged metrics for one or many runs.

    rlpost plot runs=[outputs/2026-01-01/12-00-00]                         # one run
    rlpost plot runs=[multirun/2026-01-01/12-00-00] keys=[reward,eval/accuracy] smooth=5
    rlpost plot runs=[A,B] labels=[grpo,gepo] 'keys=[rewards/*]' out=cmp.png

Each entry of ``runs`` is a run directory (one line) or a multirun directory (one line per job,
labelled with the overrides that tell its jobs apart). The figure is built by ``rlpost/analysis/plots.py``
(the same code that draws ``plots/training.png`` at the end of every run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError


@dataclass(frozen=True)
class PlotSettings:
    runs: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=lambda: ["reward", "loss", "kl", "entropy", "eval/accuracy"])
    smooth: int = 1
    labels: list[str] | None = None
    out: str | None = None


def collect(s: PlotSettings) -> dict[str, list[dict[str, Any]]]:
    """``{label: metrics rows}`` over every run and every job of every multirun in ``runs``."""
    from rlpost.analysis.sweep import job_dirs, load_jobs, split_overrides
    from rlpost.runs.rundir import read_jsonl

    out: dict[str, list[dict[str, Any]]] = {}
    for i, entry in enumerate(s.runs):
        path = Path(entry).expanduser()
        if not path.is_dir():
            raise ConfigError(f"runs[{i}]={entry!r}: no such folder (a run or multirun directory).")
        if (path / "metrics.jsonl").is_file():
            label = s.labels[i] if s.labels else path.name
            out[label] = read_jsonl(path / "metrics.jsonl")
        elif job_dirs(path):
            jobs = load_jobs(path)
            _, names = split_overrides(jobs)
            prefix = f"{s.labels[i]} " if s.labels else (f"{path.name} " if len(s.runs) > 1 else "")
            out.update({f"{prefix}{j.name}: {names[j.name]}": j.rows for j in jobs})
        else:
            raise ConfigError(f"runs[{i}]={entry!r} holds no metrics.jsonl and no job folders with one.")
    return out


def check(s: PlotSettings, overrides: list[str]) -> PlotSettings:
    if not s.runs:
        raise ConfigError("runs is empty: give run or multirun directories, e.g. runs=[outputs/2026-01-01/12-00-00].")
    if s.smooth < 1:
        raise ConfigError(f"smooth={s.smooth} must be >= 1 (1 = raw values).")
    if s.labels is not None and len(s.labels) != len(s.runs):
        raise ConfigError(f"labels has {len(s.labels)} entries but runs has {len(s.runs)}; give one per entry.")
    from rlpost.analysis.plots import expand_keys

    runs = collect(s)
    if not expand_keys(runs, tuple(s.keys)):
        logged = sorted(expand_keys(runs, ()))
        raise ConfigError(f"None of keys={list(s.keys)} is logged in these runs. Logged metrics: {', '.join(logged)}.")
    return s


def default_out(s: PlotSettings) -> Path:
    first = Path(s.runs[0]).expanduser()
    return first / "plots" / ("metrics.png" if len(s.runs) == 1 else "comparison.png")


def run(s: PlotSettings, output_dir: str, overrides: list[str]) -> int:
    from rlpost.analysis.plots import expand_keys, plot_curves

    runs = collect(s)
    out = Path(s.out) if s.out else default_out(s)
    plot_curves(runs, out, tuple(s.keys), s.smooth)
    print(f"{len(runs)} line(s) x {len(expand_keys(runs, tuple(s.keys)))} metric(s): {out}")
    return 0


APP = tool("plot", "plot", PlotSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
