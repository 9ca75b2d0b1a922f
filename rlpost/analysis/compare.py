"""``rlpost compare``: methods compared across seeds, with intervals a reviewer accepts (rlpost/analysis/stats.py).

Input: run directories, or multirun directories whose job folders are runs (rlpost/analysis/sweep.py reads
both). A *method* is the set of runs whose overrides agree once ``seed`` (and where a run was written,
``hydra.run.dir``, ``hydra.sweep.dir``, ``resume``) is dropped: its label is the overrides that tell the
methods apart. For each method and metric, over its runs' final values (the last logged value; eval
metrics come from ``summary.json``'s ``after``): n, mean, IQM, and the percentile-bootstrap 95%
interval of the mean (10,000 resamples, fixed seed: the same runs give the same interval).

Paired tests: for every two methods, the runs with the same seed are paired and their held-out
prompts matched one by one (``eval_items.json``, written by ``rlpost train`` at the end: each prompt's
correctness, 1/0, under the run's criterion, rlpost/scoring/correctness.py; its reward when the run has none).
0/1 scores get McNemar's exact test, other scores the exact sign test. Items are
pooled over the paired seeds. A pair of methods without such files is reported as "-".

Curves (``compare.png``): one panel per metric key, one line per method (the mean over its seeds at
each logged step) with a band for the bootstrap 95% interval at that step (1,000 resamples); the x
axis is ``step``, ``tokens`` (TRL's cumulative ``num_tokens``, prompts included), ``flops`` (the run's
cumulative ``train_flops`` model-FLOPs estimate, rlpost/models/flops.py) or ``seconds`` (cumulative
``step_time``), averaged over the seeds at each step, so methods can be compared at equal generated
tokens, equal compute or equal wall-clock time. Written: ``compare.md``, ``compare.tex``, ``compare.png``.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import Any

import yaml

from rlpost.analysis.plots import save_figure
from rlpost.analysis.stats import PairedTest, bootstrap_ci, iqm, sign_test
from rlpost.analysis.sweep import Job, job_dirs, load_job, split_overrides
from rlpost.runs.rundir import EVAL_ITEMS

IGNORED_KEYS = ("seed", "hydra.run.dir", "hydra.sweep.dir", "resume")  # not what a method is
X_AXES = {"step": None, "tokens": "num_tokens", "flops": "train_flops", "seconds": "step_time"}


@dataclass
class Method:
    label: str  # the overrides that tell it apart from the other methods
    jobs: list[Job]


@dataclass(frozen=True)
class Cell:
    """One metric of one method over its seeds."""

    n: int
    mean: float
    iqm: float
    low: float  # bootstrap 95% interval of the mean
    high: float


def find_runs(paths: list[Path]) -> list[Job]:
    """Each path is a run (metrics.jsonl or summary.json in it) or a multirun directory of runs."""
    jobs = []
    for path in paths:
        found = [path] if (path / "summary.json").is_file() or (path / "metrics.jsonl").is_file() else job_dirs(path)
        jobs += [replace(load_job(p), name=str(p)) for p in found]  # unique names across directories
    return jobs


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def seed_of(job: Job) -> int:
    """The run's seed: its resolved config (config.yaml), else its overrides, else rlpost's default 0."""
    config = job.path / "config.yaml"
    if config.is_file():
        seed = (yaml.safe_load(config.read_text()) or {}).get("seed")
        if seed is not None:
            return int(seed)
    for o in job.overrides:
        if _key(o) == "seed":
            return int(o.split("=", 1)[1])
    return 0


def group_methods(jobs: list[Job]) -> list[Method]:
    """Runs -> methods, in the order each first appears."""
    stripped = [replace(j, overrides=[o for o in j.overrides if _key(o) not in IGNORED_KEYS]) for j in jobs]
    _, labels = split_overrides(stripped)
    methods: dict[str, Method] = {}
    for job in jobs:
        label = labels[job.name]
        methods.setdefault(label, Method(label, [])).jobs.append(job)
    return list(methods.values())


def final_value(job: Job, metric: str) -> float | None:
    points = job.series(metric)
    return points[-1][1] if points else None


def cell(values: list[float]) -> Cell | None:
    if not values:
        return None
    low, high = bootstrap_ci(values)
    return Cell(len(values), sum(values) / len(values), iqm(values), low, high)


def table(methods: list[Method], metrics: list[str]) -> dict[str, dict[str, Cell | None]]:
    """{method label: {metric: its Cell over the method's runs (None: no run logged it)}}."""
    out = {}
    for m in methods:
        out[m.label] = {
            k: cell([v for v in (final_value(j, k) for j in m.jobs) if v is not None and math.isfinite(v)])
            for k in metrics
        }
    return out


def item_scores(job: Job) -> dict[int, float] | None:
    path = job.path / EVAL_ITEMS
    if not path.is_file():
        return None
    rows = json.loads(path.read_text())
    return {int(r["index"]): value for r in rows if (value := _item_value(r)) is not None}


def _item_value(row: dict) -> float | None:
    """What a held-out prompt is compared on: correct (1/0) with a correctness criterion, else the reward."""
    key = "correct" if "correct" in row else "score" if "score" in row else "reward"
    return None if row.get(key) is None else float(row[key])


def paired_test(a: Method, b: Method) -> PairedTest | None:
    """Seed-matched runs of a and b, their held-out prompts matched by index and pooled (module docstring)."""
    by_seed = {seed_of(j): j for j in b.jobs}
    xs, ys = [], []
    for job in a.jobs:
        other = by_seed.get(seed_of(job))
        if other is None:
            continue
        sa, sb = item_scores(job), item_scores(other)
        if sa is None or sb is None:
            continue
        common = sorted(set(sa) & set(sb))
        xs += [sa[i] for i in common]
        ys += [sb[i] for i in common]
    return sign_test(xs, ys) if xs else None


def paired_tests(methods: list[Method]) -> list[tuple[str, str, PairedTest | None]]:
    return [(a.label, b.label, paired_test(a, b)) for a, b in combinations(methods, 2)]


def _fmt(c: Cell | None, digits: int = 3) -> tuple[str, str, str]:
    if c is None:
        return "-", "-", "-"
    return f"{c.mean:.{digits}f}", f"{c.iqm:.{digits}f}", f"[{c.low:.{digits}f}, {c.high:.{digits}f}]"


def to_markdown(
    cells: dict[str, dict[str, Cell | None]], metrics: list[str], tests: list[tuple[str, str, PairedTest | None]]
) -> str:
    header = ["method", "runs"] + [f"{k} {part}" for k in metrics for part in ("mean", "IQM", "95% CI")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in cells.items():
        n = max((c.n for c in row.values() if c is not None), default=0)
        values = [v for k in metrics for v in _fmt(row[k])]
        lines.append("| " + " | ".join([label.replace("|", "\\|"), str(n), *values]) + " |")
    lines += ["", "| method A | method B | A better | B better | ties | test | p |", "|---|---|---|---|---|---|---|"]
    for a, b, t in tests:
        cells_ab = (
            ["-"] * 5 if t is None else [str(t.a_better), str(t.b_better), str(t.ties), t.name, f"{t.p_value:.4g}"]
        )
        lines.append("| " + " | ".join([a, b, *cells_ab]) + " |")
    return "\n".join(lines) + "\n"


def _tex(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        text = text.replace(char, escaped)
    return text


def to_latex(cells: dict[str, dict[str, Cell | None]], metrics: list[str]) -> str:
    """A booktabs table: per metric, mean with its 95% interval, and the IQM."""
    cols = "l" + "cc" * len(metrics)
    head = " & ".join(f"\\multicolumn{{2}}{{c}}{{{_tex(k)}}}" for k in metrics)
    sub = " & ".join("mean [95\\% CI] & IQM" for _ in metrics)
    lines = [f"\\begin{{tabular}}{{{cols}}}", "\\toprule", f"method & {head} \\\\", f" & {sub} \\\\", "\\midrule"]
    for label, row in cells.items():
        parts = []
        for k in metrics:
            mean, middle, interval = _fmt(row[k])
            parts += [f"{mean} {interval}" if row[k] is not None else "-", middle]
        lines.append(f"{_tex(label)} & " + " & ".join(parts) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def curve(method: Method, key: str, x_axis: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """(x, mean, low, high) per logged step: the method's mean over seeds and its bootstrap interval."""
    per_step: dict[int, list[float]] = {}
    xs: dict[int, list[float]] = {}
    column = X_AXES[x_axis]
    for job in method.jobs:
        elapsed = 0.0
        for row in job.rows:
            if column == "step_time" and isinstance(row.get("step_time"), (int, float)):
                elapsed += float(row["step_time"])
            value = row.get(key)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or "step" not in row:
                continue
            step = int(row["step"])
            x = float(step) if column is None else elapsed if column == "step_time" else row.get(column)
            if x is None:
                continue
            per_step.setdefault(step, []).append(float(value))
            xs.setdefault(step, []).append(float(x))
    steps = sorted(per_step)
    bands = [bootstrap_ci(per_step[s], resamples=1000) for s in steps]
    return (
        [sum(xs[s]) / len(xs[s]) for s in steps],
        [sum(per_step[s]) / len(per_step[s]) for s in steps],
        [b[0] for b in bands],
        [b[1] for b in bands],
    )


def plot(methods: list[Method], keys: list[str], x_axis: str, out_file: Path) -> Path | None:
    """compare.png: one panel per key with any data, mean line and 95% band per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(k, [(m.label, curve(m, k, x_axis)) for m in methods]) for k in keys]
    panels = [(k, lines) for k, lines in panels if any(c[0] for _, c in lines)]
    if not panels:
        return None
    # the legend goes under the panels, one method per line: labels are override lists, often wider than a panel
    names = [textwrap.fill(m.label, 100, subsequent_indent="    ") for m in methods]
    legend_lines = sum(n.count("\n") + 1 for n in names)
    legend_h = 0.17 * legend_lines + 0.2  # inches at fontsize 7
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6 + legend_h), squeeze=False)
    for ax, (key, lines) in zip(axes[0], panels):
        for label, (x, mean, low, high) in lines:
            if x:
                ax.plot(x, mean, label=label)
                ax.fill_between(x, low, high, alpha=0.2)
        ax.set_title(key)
        labels = {"step": "optimizer step", "tokens": "tokens (TRL num_tokens)", "flops": "model FLOPs (train_flops)"}
        ax.set_xlabel({**labels, "seconds": "seconds"}[x_axis])
    handles, labels = axes[0][0].get_legend_handles_labels()  # the first panel holds every method with data
    wrapped = dict(zip((m.label for m in methods), names))
    fig.legend(handles, [wrapped[label] for label in labels], loc="lower left", fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_h / (3.6 + legend_h), 1, 1))
    return save_figure(fig, out_file)


def write_comparison(
    paths: list[Path], metrics: list[str], curve_keys: list[str], x_axis: str, out_dir: Path
) -> dict[str, Any]:
    """compare.md, compare.tex and compare.png into ``out_dir``; returns what they show."""
    from rlpost.runs.rundir import write_atomic

    methods = group_methods(find_runs(paths))
    cells = table(methods, metrics)
    tests = paired_tests(methods)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(cells, metrics, tests)
    write_atomic(out_dir / "compare.md", markdown)
    write_atomic(out_dir / "compare.tex", to_latex(cells, metrics))
    png = plot(methods, curve_keys, x_axis, out_dir / "compare.png")
    return {"methods": methods, "cells": cells, "tests": tests, "markdown": markdown, "plot": png}
