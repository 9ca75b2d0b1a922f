"""``rlpost report path=PATH``: one self-contained HTML page for a run directory or a whole sweep.

PATH is a run directory (holds config.yaml or metrics.jsonl) or a multirun folder whose job
subfolders are run directories (the command: rlpost/tools/report.py, conf/report.yaml).
The page (``PATH/report.html`` unless ``out=``) holds: a table of the runs (overrides, steps,
held-out metrics before -> after), the inert components of each run (activity figures that stayed 0,
with the reason: summary.json ``inert``, or read from metrics.jsonl for a run without a summary,
rlpost/analysis/inert.py), the training curves and a diagnostics panel as PNGs embedded in
base64 (drawn by rlpost/analysis/plots.py), the config keys that differ between jobs (the resolved config of
a single run), and a sample of completions per step with their reward terms. No external URL, stylesheet or script: it opens offline in any browser.
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from rlpost.analysis.inert import inert_figures
from rlpost.analysis.plots import DEFAULT_KEYS, plot_curves
from rlpost.runs.rundir import read_jsonl

DIAGNOSTIC_KEYS = (
    "grad_norm",
    "completions/mean_length",
    "rlpost/advantage/std",
    "clip_ratio/region_mean",
    "regen/is_weight_mean",
)
SUMMARY_KEYS = ("eval/accuracy", "eval/reward", "eval/mean_length")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; }
pre { margin: 0; white-space: pre-wrap; max-height: 12em; overflow: auto; font-size: 0.85em; }
.diff { background: #fff3cd; }
"""


def is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file() or (path / "metrics.jsonl").is_file()


def find_runs(path: Path) -> list[Path]:
    """The run directories of PATH: itself, or its job subfolders in numeric-then-name order."""
    if is_run(path):
        return [path]
    jobs = [p for p in path.iterdir() if p.is_dir() and is_run(p)] if path.is_dir() else []
    return sorted(jobs, key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name))


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def overrides_of(run: Path) -> list[str]:
    for file in (run / "overrides.yaml", run / ".hydra" / "overrides.yaml"):
        value = read_yaml(file)
        if isinstance(value, list):
            return [str(v) for v in value]
    return []


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay whole values."""
    if not isinstance(node, dict):
        return {prefix: node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_differences(configs: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Keys whose value is not the same in every job: [(key, [value per job])], sorted by key."""
    missing = object()
    keys = sorted(set().union(*configs)) if configs else []
    rows = []
    for key in keys:
        values = [c.get(key, missing) for c in configs]
        if any(json.dumps(v, default=str) != json.dumps(values[0], default=str) for v in values):
            rows.append((key, ["(absent)" if v is missing else v for v in values]))
    return rows


def png_base64(runs: dict[str, list[dict[str, Any]]], keys: tuple[str, ...], window: int) -> str | None:
    with tempfile.TemporaryDirectory() as folder:
        path = plot_curves(runs, Path(folder) / "plot.png", keys=keys, window=window)
        return base64.b64encode(path.read_bytes()).decode("ascii") if path else None


def text_of(value: Any) -> str:
    """A prompt or completion as text: chat messages joined as 'role: content'."""
    if isinstance(value, list):
        return "\n".join(
            f"{m.get('role', '?')}: {m.get('content', '')}" if isinstance(m, dict) else str(m) for m in value
        )
    return str(value)


def cell(value: Any, css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    if isinstance(value, float):
        return f'<td class="num{" " + css if css else ""}">{value:.4g}</td>'
    return f"<td{cls}>{html.escape(str(value))}</td>"


def table(table_id: str, header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def build_report(path: str | Path, samples_per_step: int = 2, window: int = 1) -> str:
    """The HTML text of the report of PATH (a run directory or a sweep folder)."""
    path = Path(path)
    runs = find_runs(path)
    if not runs:
        raise FileNotFoundError(f"{path} is neither a run directory nor a folder of run directories")
    overrides = [overrides_of(r) for r in runs]
    shared = set.intersection(*(set(o) for o in overrides))
    labels = [r.name + "".join(f" {o}" for o in ov if o not in shared) for r, ov in zip(runs, overrides)]
    metrics = {label: read_jsonl(r / "metrics.jsonl") for label, r in zip(labels, runs)}
    parts = [f"<h1>rlpost report: {html.escape(path.name)}</h1>"]
    parts.append(f"<p>{html.escape(str(path.resolve()))}: {len(runs)} run{'s' if len(runs) > 1 else ''}.</p>")

    rows, summaries = [], []
    for run, ov, label in zip(runs, overrides, labels):
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
        summaries.append(summary)
        cells = [cell(run.name), cell(" ".join(ov) or "(defaults)"), cell(summary.get("algorithm", "-"))]
        cells.append(cell(summary.get("steps", len([m for m in metrics[label] if "loss" in m]))))
        for key in SUMMARY_KEYS:
            before, after = summary.get("before", {}).get(key), summary.get("after", {}).get(key)
            cells.append(cell(f"{_fmt(before)} -> {_fmt(after)}" if after is not None else "-"))
        cells.append(cell(summary.get("seconds_per_step", "-")))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    parts += ["<h2>Runs</h2>", table("runs", ["job", "overrides", "algorithm", "steps", *SUMMARY_KEYS, "s/step"], rows)]
    parts += ["<h2>Inert components</h2>", inert_table(runs, summaries, [metrics[label] for label in labels])]

    for title, img_id, keys in (
        ("Training curves", "curves", DEFAULT_KEYS),
        ("Diagnostics", "diagnostics", DIAGNOSTIC_KEYS),
    ):
        data = png_base64(metrics, keys, window)
        parts.append(f"<h2>{title}</h2>")
        parts.append(
            f'<img id="{img_id}" alt="{title.lower()}" src="data:image/png;base64,{data}">'
            if data
            else "<p>(no logged values)</p>"
        )

    configs = [read_yaml(r / "config.yaml") or {} for r in runs]
    if len(runs) > 1:
        diff = config_differences([flatten(c) for c in configs])
        rows = [
            f"<tr>{cell(key)}{''.join(cell(json.dumps(v, default=str), 'diff') for v in values)}</tr>"
            for key, values in diff
        ]
        parts += ["<h2>Config differences</h2>", table("config-diff", ["key", *[r.name for r in runs]], rows)]
    parts.append("<h2>Resolved config</h2>")
    for run, config in zip(runs, configs):
        dump = html.escape(yaml.safe_dump(config, sort_keys=False))
        parts.append(f"<details><summary>{html.escape(run.name)}: config.yaml</summary><pre>{dump}</pre></details>")

    parts.append("<h2>Samples</h2>")
    parts.append(samples_table(runs, samples_per_step))
    body = "\n".join(parts)
    title = html.escape(f"rlpost report: {path.name}")
    return f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n'


def inert_table(runs: list[Path], summaries: list[dict[str, Any]], metrics: list[list[dict[str, Any]]]) -> str:
    """Every component whose activity figure stayed 0 for its whole run: summary.json's ``inert`` (with the
    components' own reasons), else computed from metrics.jsonl (generic reasons only: a run without a summary)."""
    rows = []
    for run, summary, logged in zip(runs, summaries, metrics):
        entries = summary["inert"] if "inert" in summary else inert_figures(logged)
        source = "summary.json" if "inert" in summary else "metrics.jsonl"
        for entry in entries:
            cells = [cell(run.name), cell(entry["component"]), cell(entry["steps"]), cell(entry.get("reason") or "-")]
            rows.append(f"<tr>{''.join(cells)}{cell(source)}</tr>")
    if not rows:
        return '<p id="inert">(none: every reported activity figure was non-zero at some step)</p>'
    return table("inert", ["job", "component", "steps at 0", "reason", "from"], rows)


def samples_table(runs: list[Path], per_step: int) -> str:
    """Up to ``per_step`` completions per job and step from samples.jsonl, with every reward term."""
    picked = []
    for run in runs:
        counts: dict[int, int] = {}
        for row in read_jsonl(run / "samples.jsonl"):
            step = row.get("step", -1)
            if counts.get(step, 0) < per_step:
                counts[step] = counts.get(step, 0) + 1
                picked.append((run.name, row))
    terms = sorted({t for _, row in picked for t in row.get("terms", {})})
    rows = []
    for job, row in picked:
        cells = [cell(job), cell(row.get("step", "-"))]
        cells += [f"<td><pre>{html.escape(text_of(row.get(k, '')))}</pre></td>" for k in ("prompt", "completion")]
        cells += [cell(float(row["reward"])) if isinstance(row.get("reward"), (int, float)) else cell("-")]
        cells += [
            cell(float(row["terms"][t])) if isinstance(row.get("terms", {}).get(t), (int, float)) else cell("-")
            for t in terms
        ]
        cells += [cell(float(row.get("advantage", float("nan")))), cell(row.get("length", "-"))]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = ["job", "step", "prompt", "completion", "reward", *[f"term: {t}" for t in terms], "advantage", "length"]
    return table("samples", header, rows)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def write_report(path: str | Path, out: str | Path | None = None, samples_per_step: int = 2, window: int = 1) -> Path:
    target = Path(out) if out else Path(path) / "report.html"
    target.write_text(build_report(path, samples_per_step, window), encoding="utf-8")
    return target
