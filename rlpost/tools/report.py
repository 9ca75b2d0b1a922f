"""``rlpost report path=DIR [out=FILE] [samples_per_step=N] [smooth=W]``: one self-contained HTML page of a
run directory or a whole sweep (built by rlpost/analysis/report.py). A Hydra app on ``conf/report.yaml``; ``-m`` works.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlpost.analysis.report import find_runs, write_report
from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError


@dataclass(frozen=True)
class ReportSettings:
    path: str = "???"  # a run directory or a multirun folder
    out: str | None = None  # the HTML file (null = <path>/report.html)
    samples_per_step: int = 2  # completions shown per job and step
    smooth: int = 1  # moving-average window of the curves (1 = raw)


def check(s: ReportSettings, overrides: list[str]) -> ReportSettings:
    if s.samples_per_step < 0 or s.smooth < 1:
        raise ConfigError(f"samples_per_step={s.samples_per_step} must be >= 0 and smooth={s.smooth} >= 1.")
    path = Path(s.path).expanduser()
    if not path.is_dir():
        raise ConfigError(f"path={s.path!r}: no such folder (a run directory or a multirun folder).")
    if not find_runs(path):  # before Hydra starts: exit 2 with nothing written
        raise ConfigError(f"{path} is neither a run directory nor a folder of run directories")
    return s


def run(s: ReportSettings, output_dir: str, overrides: list[str]) -> int:
    target = write_report(Path(s.path).expanduser(), s.out, s.samples_per_step, s.smooth)
    print(f"report: {target}")
    return 0


APP = tool("report", "report", ReportSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
