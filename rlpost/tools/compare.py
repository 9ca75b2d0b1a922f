"""``rlpost compare``: methods across seeds with mean, IQM and bootstrap 95% intervals, paired per-item
tests, and curves with interval bands (the logic is rlpost/analysis/compare.py, the statistics rlpost/analysis/stats.py).

    rlpost compare runs=[runs/grpo-s0,runs/grpo-s1,runs/gepo-s0,runs/gepo-s1]
    rlpost compare dir=multirun/2026-01-01/12-00-00 'metrics=[eval/accuracy,eval/reward]' x_axis=tokens

Writes ``compare.md``, ``compare.tex`` and ``compare.png`` into ``out`` (default: the multirun
directory, or the first run's parent) and prints the markdown table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError


@dataclass(frozen=True)
class CompareSettings:
    runs: list[str] = field(default_factory=list)
    dir: str | None = None
    metrics: list[str] = field(default_factory=lambda: ["eval/accuracy", "eval/reward"])
    curves: list[str] = field(default_factory=lambda: ["reward", "eval/accuracy"])
    x_axis: str = "step"
    out: str | None = None


def paths(s: CompareSettings) -> list[Path]:
    return [Path(p).expanduser() for p in ([s.dir] if s.dir else []) + list(s.runs)]


def check(s: CompareSettings, overrides: list[str]) -> CompareSettings:
    from rlpost.analysis.compare import X_AXES, find_runs, group_methods

    if not s.runs and not s.dir:
        raise ConfigError("nothing to compare: give runs=[<run dir>,...] or dir=<multirun dir>.")
    if s.x_axis not in X_AXES:
        raise ConfigError(f"Invalid x_axis={s.x_axis!r}. Valid choices: {', '.join(X_AXES)}.")
    for i, path in enumerate(paths(s)):
        if not path.is_dir():
            raise ConfigError(f"{'dir' if s.dir and i == 0 else 'runs'}={str(path)!r}: no such folder.")
    jobs = find_runs(paths(s))
    if not jobs:
        raise ConfigError("no runs found: each entry must be a run directory or a multirun directory of runs.")
    if len(group_methods(jobs)) < 2:
        raise ConfigError(
            f"all {len(jobs)} runs have the same overrides apart from the seed: one method, nothing to compare."
        )
    logged = {k for j in jobs for r in j.rows for k in r} | {k for j in jobs for k in j.summary.get("after", {})}
    missing = [m for m in s.metrics if m not in logged]
    if missing:
        raise ConfigError(f"metrics {missing} are logged by none of the runs. Logged: {', '.join(sorted(logged))}.")
    return s


def run(s: CompareSettings, output_dir: str, overrides: list[str]) -> int:
    from rlpost.analysis.compare import write_comparison

    first = paths(s)[0]
    out = Path(s.out).expanduser() if s.out else first if s.dir else first.parent
    result = write_comparison(paths(s), list(s.metrics), list(s.curves), s.x_axis, out)
    print(result["markdown"])
    written = [out / "compare.md", out / "compare.tex", *([result["plot"]] if result["plot"] else [])]
    print("written: " + ", ".join(str(p) for p in written))
    return 0


APP = tool("compare", "compare", CompareSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
