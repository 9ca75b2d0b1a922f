"""Sweep summaries: final and best metrics per job of a multirun, with the overrides that tell jobs apart.

A job is a sub-folder of the sweep directory holding ``metrics.jsonl``, ``summary.json`` or
``eval.json`` (train, train-rm and eval multiruns). Its value series for a metric come from
``metrics.jsonl`` (training logs, eval rows at step 0 / every ``eval.every`` / the end); a metric
absent there is read from ``summary.json`` (``before`` at step 0, ``after`` at the last step) or
``eval.json`` (``results``). *final* is the last logged value, *best* the maximum (the minimum for
metrics listed in ``minimize``) with its step. An eval sweep (``rlpost eval -m``) has one column per
metric of its results instead. The overrides column shows only the overrides whose
values differ between jobs; the shared ones are printed once above the table.

The Hydra callback writes ``sweep_summary.md``, ``sweep_summary.csv`` and ``plots/sweep.png`` (one
line per job) into the sweep folder when a multirun ends; ``rlpost sweep-summary`` does the same
for any multirun directory, with metrics of your choice.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from rlpost.runs.rundir import read_jsonl

COLUMNS = ("eval/accuracy", "eval/reward", "eval/mean_length")
DEFAULT_METRICS = ("eval/accuracy", "eval/reward", "reward", "kl")
DEFAULT_MINIMIZE = ("loss", "kl")
LAUNCH_KEYS = ("resume",)  # overrides that may differ between the launches of one sweep, not its settings


@dataclass
class Job:
    name: str
    path: Path
    overrides: list[str]
    rows: list[dict[str, Any]]  # metrics.jsonl rows
    summary: dict[str, Any] = field(default_factory=dict)  # summary.json
    results: dict[str, Any] = field(default_factory=dict)  # eval.json "results"

    @property
    def done(self) -> bool:
        return bool(self.summary or self.results) and not self.summary.get("preempted")

    @property
    def status(self) -> str:
        """done, preempted (a checkpoint was saved; ``resume=auto`` continues it) or incomplete."""
        return "done" if self.done else "preempted" if self.summary.get("preempted") else "incomplete"

    def series(self, key: str) -> list[tuple[int, float]]:
        """``[(step, value)]`` of one metric, from metrics.jsonl, else summary.json / eval.json."""
        points = [(int(r.get("step", 0)), float(r[key])) for r in self.rows if _number(r.get(key))]
        if points:
            return points
        last = int(self.summary.get("steps", 0) or 0)
        for step, block in ((0, "before"), (last, "after")):
            if _number(self.summary.get(block, {}).get(key)):
                points.append((step, float(self.summary[block][key])))
        if not points and _number(self.results.get(key)):
            points.append((0, float(self.results[key])))
        return points


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job folders of a multirun, in job-number order."""
    marks = ("metrics.jsonl", "summary.json", "eval.json")
    found = [p for p in sweep_dir.iterdir() if p.is_dir() and any((p / m).is_file() for m in marks)]
    return sorted(found, key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name))


def read_overrides(job_dir: Path) -> list[str]:
    import yaml

    for name in (".hydra/overrides.yaml", "overrides.yaml"):
        if (job_dir / name).is_file():
            return [str(o) for o in yaml.safe_load((job_dir / name).read_text()) or []]
    return []


def load_job(job_dir: Path) -> Job:
    def read(name: str) -> dict:
        return json.loads((job_dir / name).read_text()) if (job_dir / name).is_file() else {}

    return Job(
        name=job_dir.name,
        path=job_dir,
        overrides=read_overrides(job_dir),
        rows=read_jsonl(job_dir / "metrics.jsonl"),
        summary=read("summary.json"),
        results=read("eval.json").get("results", {}),
    )


def load_jobs(sweep_dir: Path) -> list[Job]:
    return [load_job(d) for d in job_dirs(sweep_dir)]


def split_overrides(jobs: list[Job]) -> tuple[list[str], dict[str, str]]:
    """(overrides every job shares, ``{job name: the overrides that differ}``; a key a job lacks shows as absent)."""

    def as_dict(job: Job) -> dict[str, str]:  # resume= tells launches apart, not jobs
        pairs = (o.split("=", 1) if "=" in o else (o, "") for o in job.overrides)
        return {k: v for k, v in pairs if k.lstrip("+~") not in LAUNCH_KEYS}

    parsed = {job.name: as_dict(job) for job in jobs}
    keys = list(dict.fromkeys(k for d in parsed.values() for k in d))
    varying = [k for k in keys if len({d.get(k) for d in parsed.values()}) > 1]
    common = [f"{k}={parsed[jobs[0].name][k]}" for k in keys if k not in varying] if jobs else []
    labels = {name: " ".join(f"{k}={d[k]}" for k in varying if k in d) or "(defaults)" for name, d in parsed.items()}
    return common, labels


def is_eval_sweep(jobs: list[Job]) -> bool:
    """Every job is an ``rlpost eval`` job (eval.json, no training log): one value per metric."""
    return bool(jobs) and all(j.results and not j.rows for j in jobs)


def eval_metrics(jobs: list[Job]) -> list[str]:
    skip = ("num_prompts", "samples_per_prompt")
    keys = dict.fromkeys(k for j in jobs for k, v in j.results.items() if _number(v) and not k.endswith(skip))
    return list(keys)


def summary_rows(jobs: list[Job], metrics: list[str], minimize: list[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: job, overrides, status, then final and best (with step) per metric, s/step.
    An eval sweep (``is_eval_sweep``) has one value per metric and no s/step."""
    _, labels = split_overrides(jobs)
    if is_eval_sweep(jobs):
        header = ["job", "overrides", "status", *metrics]
        rows = [[j.name, labels[j.name], "done", *(_fmt(j.results.get(m)) for m in metrics)] for j in jobs]
        return header, rows
    header = ["job", "overrides", "status"]
    for m in metrics:
        header += [f"{m} final", f"{m} best"]
    header.append("s/step")
    rows = []
    for job in jobs:
        cells = [job.name, labels[job.name], job.status]
        for m in metrics:
            points = job.series(m)
            if not points:
                cells += ["-", "-"]
                continue
            pick = min if m in minimize else max
            step, best = pick(points, key=lambda p: p[1])
            cells += [_fmt(points[-1][1]), f"{_fmt(best)} @{step}"]
        cells.append(_fmt(job.summary.get("seconds_per_step")))
        rows.append(cells)
    return header, rows


def to_markdown(header: list[str], rows: list[list[str]], common: list[str]) -> str:
    escape = [[c.replace("|", "\\|") for c in r] for r in [header, *rows]]
    lines = [f"Shared by every job: `{' '.join(common)}`\n" if common else ""]
    lines += ["| " + " | ".join(escape[0]) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in escape[1:]]
    return "\n".join(line for line in lines if line) + "\n"


def to_csv(header: list[str], rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def summarize_sweep(
    sweep_dir: Path, metrics: tuple[str, ...] = DEFAULT_METRICS, minimize: tuple[str, ...] = DEFAULT_MINIMIZE
) -> str:
    """Markdown table over every job folder of a sweep."""
    jobs = load_jobs(Path(sweep_dir))
    header, rows = summary_rows(jobs, list(metrics), list(minimize))
    return to_markdown(header, rows, split_overrides(jobs)[0])


def write_sweep_files(
    sweep_dir: Path, out_dir: Path, metrics: list[str], minimize: list[str], plot_keys: list[str], smooth: int = 1
) -> dict[str, Any]:
    """sweep_summary.md/.csv and plots/sweep.png for a sweep; returns the table and paths.
    Every caller gets the table; the main process alone writes the files (rlpost/runs/ranks.py)."""
    from rlpost.analysis.plots import plot_curves
    from rlpost.runs.ranks import is_main
    from rlpost.runs.rundir import write_atomic

    jobs = load_jobs(sweep_dir)
    header, rows = summary_rows(jobs, metrics, minimize)
    common, labels = split_overrides(jobs)
    if is_main():
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(out_dir / "sweep_summary.md", to_markdown(header, rows, common))
        write_atomic(out_dir / "sweep_summary.csv", to_csv(header, rows))
    runs = {f"{j.name}: {labels[j.name]}": j.rows for j in jobs}
    plot = (
        plot_curves(runs, out_dir / "plots" / "sweep.png", tuple(plot_keys), smooth) if jobs and jobs[0].rows else None
    )
    return {"header": header, "rows": rows, "common": common, "plot": plot, "jobs": len(jobs)}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


class SweepSummaryCallback(Callback):
    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from rlpost.analysis.plots import DEFAULT_KEYS

        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir() and job_dirs(sweep_dir):
            jobs = load_jobs(sweep_dir)
            metrics = eval_metrics(jobs) if is_eval_sweep(jobs) else list(DEFAULT_METRICS)
            files = write_sweep_files(sweep_dir, sweep_dir, metrics, list(DEFAULT_MINIMIZE), list(DEFAULT_KEYS))
            print(to_markdown(files["header"], files["rows"], files["common"]))
