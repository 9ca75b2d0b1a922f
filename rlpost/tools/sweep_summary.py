"""``rlpost sweep-summary``: final and best metrics over the jobs of a multirun.

    rlpost sweep-summary dir=multirun/2026-01-01/12-00-00
    rlpost sweep-summary dir=... 'metrics=[eval/accuracy,reward,rewards/*/mean]' minimize=[loss,kl]

Prints a terminal table and writes ``sweep_summary.md`` and ``sweep_summary.csv`` (plus
``plots/sweep.png``, one line per job) into ``out`` (default: the multirun directory). The table
logic is ``rlpost/analysis/sweep.py``, which the multirun callback of ``rlpost train -m`` also runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError


@dataclass(frozen=True)
class SweepSummarySettings:
    dir: str | None = None
    metrics: list[str] = field(default_factory=lambda: ["eval/accuracy", "eval/reward", "reward", "kl"])
    minimize: list[str] = field(default_factory=lambda: ["loss", "kl"])
    plot_keys: list[str] = field(default_factory=lambda: ["reward", "loss", "kl", "entropy", "eval/accuracy"])
    smooth: int = 1
    out: str | None = None


def metric_names(s: SweepSummarySettings) -> list[str]:
    """``metrics`` with shell patterns expanded against what the jobs logged."""
    import fnmatch

    from rlpost.analysis.sweep import load_jobs

    assert s.dir is not None  # check() refuses a missing dir
    jobs = load_jobs(Path(s.dir))
    logged = list(
        dict.fromkeys([*(k for job in jobs for r in job.rows for k in r), *(k for j in jobs for k in j.results)])
    )
    names: list[str] = []
    for m in s.metrics:
        names += [k for k in (fnmatch.filter(logged, m) if any(c in m for c in "*?[") else [m]) if k not in names]
    return names


def check(s: SweepSummarySettings, overrides: list[str]) -> SweepSummarySettings:
    from rlpost.analysis.sweep import job_dirs

    if not s.dir:
        raise ConfigError("dir is not set: rlpost sweep-summary dir=<multirun directory>.")
    folder = Path(s.dir).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"dir={s.dir!r}: no such folder.")
    if not job_dirs(folder):
        raise ConfigError(
            f"dir={s.dir!r} holds no job folders (sub-folders with metrics.jsonl, summary.json or eval.json)."
        )
    if not metric_names(s):
        raise ConfigError(f"metrics={list(s.metrics)} match nothing the jobs logged.")
    if s.smooth < 1:
        raise ConfigError(f"smooth={s.smooth} must be >= 1.")
    return s


def run(s: SweepSummarySettings, output_dir: str, overrides: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from rlpost.analysis.sweep import write_sweep_files

    assert s.dir is not None  # check() refuses a missing dir
    folder = Path(s.dir).expanduser()
    out = Path(s.out).expanduser() if s.out else folder
    files = write_sweep_files(folder, out, metric_names(s), list(s.minimize), list(s.plot_keys), s.smooth)
    caption = f"shared by every job: {' '.join(files['common'])}" if files["common"] else None
    table = Table(*files["header"], title=f"{folder} ({files['jobs']} jobs)", caption=caption)
    for row in files["rows"]:
        table.add_row(*row)
    Console().print(table)
    print(
        f"written: {out / 'sweep_summary.md'}, {out / 'sweep_summary.csv'}"
        + (f", {files['plot']}" if files["plot"] else "")
    )
    return 0


APP = tool("sweep-summary", "sweep_summary", SweepSummarySettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
