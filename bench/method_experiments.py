"""Short CPU experiments of the named methods against their GRPO baselines at equal steps.

Each pair runs one method recipe and its GRPO baseline on the same seed, data and batch, one run at a
time (two torch processes on 2 cores slow each other several-fold), into ``runs/methods/<name>``;
a finished run (its summary.json exists) is not run again. Then one markdown table per pair is
printed and written to ``bench/METHODS.md``: held-out accuracy before/after and, per metric, the
mean over the first and the second half of the steps (the trajectory the paper says should move);
the per-step curves of each pair go to ``runs/methods/<pair>-<steps>.png``. The pairs: ``bench/method_pairs.py`` (by family).

    python bench/method_experiments.py [--only or,tp] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from method_pairs import Pair, pairs

from rlpost.analysis.plots import plot_curves

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "methods"
COMMON = ["logging.trackers=[]", "logging.plots=false"]


def run(name: str, overrides: list[str]) -> Path:
    out = RUNS / name
    if (out / "summary.json").exists():
        return out
    cmd = [sys.executable, "-m", "rlpost.cli", "train", *overrides, *COMMON, f"hydra.run.dir={out}"]
    print("$", " ".join(cmd[2:]), flush=True)
    started = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True)
    print(f"  {name}: {time.time() - started:.0f} s", flush=True)
    return out


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def halves(values: list[float]) -> str:
    if not values:
        return "-"
    mid = max(len(values) // 2, 1)
    first, second = values[:mid], values[mid:] or values[:mid]
    return f"{sum(first) / len(first):.3f} -> {sum(second) / len(second):.3f}"


def table(pair: Pair, runs: dict[str, Path]) -> str:
    header = "| run | s/step | " + " | ".join(pair.eval_keys) + " | " + " | ".join(pair.metrics) + " |"
    lines = [f"### {pair.title}", "", header, "|" + "---|" * (2 + len(pair.eval_keys) + len(pair.metrics))]
    for label, path in runs.items():
        summary = json.loads((path / "summary.json").read_text())
        steps = [log for log in read_metrics(path) if "grad_norm" in log]
        evals = [
            f"{summary['before'].get(k, float('nan')):.3f} -> {summary['after'].get(k, float('nan')):.3f}"
            for k in pair.eval_keys
        ]
        series = [
            halves([s.get(k, s.get(f"rlpost/{k}")) for s in steps if {k, f"rlpost/{k}"} & s.keys()])
            for k in pair.metrics
        ]
        lines.append(f"| {label} | {summary['seconds_per_step']:.1f} | " + " | ".join(evals + series) + " |")
    lines.append("")
    lines.append("Metrics: mean over the first half of the steps -> mean over the second half.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="or,tp,air,gepo", help="comma-separated pair names")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    chosen = [p for p in pairs(args.steps) if p.name in args.only.split(",")]
    report = []
    for pair in chosen:
        runs = {pair.name: run(f"{pair.name}-{args.steps}", pair.method)}
        if pair.baseline is not None:
            runs[pair.baseline_label] = run(f"{pair.name}-grpo-{args.steps}", pair.baseline)
        for k, (label, overrides) in enumerate(pair.extra.items()):
            runs[label] = run(f"{pair.name}-extra{k}-{args.steps}", overrides)
        report.append(table(pair, runs))
        plot = plot_curves(
            {label: read_metrics(path) for label, path in runs.items()},
            RUNS / f"{pair.name}-{args.steps}.png",
            keys=tuple(pair.metrics),
        )
        print(f"plot: {plot}", flush=True)
        print(report[-1], flush=True)
    path = ROOT / "bench" / "METHODS.md"
    text = (
        path.read_text()
        if path.exists()
        else (
            "# Named methods against GRPO at equal steps (CPU, SmolLM2-135M, seed 0)\n\n"
            "Written by `python bench/method_experiments.py`.\n\n"
        )
    )
    for section in report:  # each pair's section replaces its earlier version; the others stay
        text = replace_section(text, section)
    path.write_text(text)


def replace_section(text: str, section: str) -> str:
    """``text`` with the ``### title`` section of ``section`` replaced (up to the next ``##``), or appended."""
    title = section.splitlines()[0]
    start = text.find(title + "\n")
    if start < 0:
        return text.rstrip("\n") + "\n\n" + section
    end = text.find("\n#", start + len(title))
    return text[:start] + section + ("\n" + text[end + 1 :] if end >= 0 else "")


if __name__ == "__main__":
    main()
