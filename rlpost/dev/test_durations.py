"""``python -m rlpost.dev.test_durations JUNIT.xml``: where the time of a full test run goes, as docs/test_durations.md.

Reads the JUnit XML that ``pytest --junitxml`` writes (``PYTEST_ADDOPTS=--junitxml=run.xml make test``) and writes
the run's total, the time per test folder (tests/config, integration, trainer, unit/<package>) and the slowest
tests, so a change that makes ``make test`` slower shows up in review. The header says on which machine and at
which commit the run was taken (``--machine``, ``--commit``); the numbers are one run's, not a benchmark.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "test_durations.md"


@dataclass(frozen=True)
class Case:
    """One test of the run: its pytest id, wall time (setup + call + teardown, as JUnit counts it) and outcome."""

    test: str
    seconds: float
    outcome: str  # passed, failed, error, skipped


def read_cases(xml: Path) -> tuple[list[Case], float]:
    """The run's test cases and its wall time (the testsuite's ``time``) from a pytest JUnit XML file."""
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, f"{xml}: no <testsuite>"
    cases = []
    for case in suite.iter("testcase"):
        path = case.get("classname", "").replace(".", "/")  # tests.unit.core.test_x -> tests/unit/core/test_x
        test = f"{path}.py::{case.get('name')}"
        outcome = next((tag for tag in ("failure", "error", "skipped") if case.find(tag) is not None), "passed")
        cases.append(Case(test, float(case.get("time", 0.0)), {"failure": "failed"}.get(outcome, outcome)))
    return cases, float(suite.get("time", 0.0))


def folder(test: str) -> str:
    """The folder a test is counted under: tests/<top> or, for unit tests, tests/unit/<package>."""
    parts = test.split("/")
    return "/".join(parts[:3] if len(parts) > 3 and parts[1] == "unit" else parts[:2])


def render(cases: list[Case], wall: float, machine: str, commit: str, slowest: int = 40) -> str:
    """docs/test_durations.md's text."""
    counts: dict[str, int] = {}
    for c in cases:
        counts[c.outcome] = counts.get(c.outcome, 0) + 1
    per_folder: dict[str, list[float]] = {}
    for c in cases:
        per_folder.setdefault(folder(c.test), []).append(c.seconds)
    lines = [
        "# Where the time of `make test` goes",
        "",
        f"One full run (`PYTEST_ADDOPTS=--junitxml=run.xml make test`) at commit `{commit}` on {machine}, written",
        "by `python -m rlpost.dev.test_durations run.xml`. One run's numbers, not a benchmark: they move with the",
        "machine's load. The budget is 30 minutes on a 2-core machine (the README's `make test`).",
        "",
        f"**Total**: {wall / 60:.1f} min wall for {len(cases)} tests ("
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + f"); the tests' own times sum to {sum(c.seconds for c in cases) / 60:.1f} min (more than the wall: make test"
        + " runs them on two pytest-xdist workers). The minutes below are the tests' own times.",
        "",
        "## Per folder",
        "",
        "| folder | tests | minutes | share |",
        "|---|---:|---:|---:|",
    ]
    total = sum(c.seconds for c in cases) or 1.0
    for name, times in sorted(per_folder.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"| `{name}` | {len(times)} | {sum(times) / 60:.1f} | {100 * sum(times) / total:.0f}% |")
    lines += ["", f"## The {slowest} slowest tests", "", "| seconds | test |", "|---:|---|"]
    for c in sorted(cases, key=lambda c: -c.seconds)[:slowest]:
        lines.append(f"| {c.seconds:.1f} | `{c.test}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", type=Path, help="pytest's JUnit XML of a full run")
    parser.add_argument("--machine", default="the 2-core CPU machine (no GPU)")
    parser.add_argument("--commit", default="?")
    parser.add_argument("--out", type=Path, default=DOC)
    args = parser.parse_args(argv)
    cases, wall = read_cases(args.xml)
    args.out.write_text(render(cases, wall, args.machine, args.commit))
    print(f"{args.out}: {len(cases)} tests, {wall / 60:.1f} min")


if __name__ == "__main__":
    main()
