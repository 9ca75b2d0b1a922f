"""``rlpost compare``: methods across seeds with mean, IQM, bootstrap 95% intervals and the SD across seeds,
paired per-item tests, curves with interval bands and, against ``baseline=<arm>``, the seed-paired
differences with their verdicts (the logic is rlpost/analysis/compare.py, the reductions
rlpost/analysis/reductions.py, the statistics rlpost/analysis/stats.py).

    rlpost compare runs=[runs/grpo-s0,runs/grpo-s1,runs/gepo-s0,runs/gepo-s1]
    rlpost compare dir=multirun/2026-01-01/12-00-00 'metrics=[eval/accuracy,eval/reward]' x_axis=tokens
    rlpost compare 'runs=[runs/or,runs/grpo]' baseline=runs/grpo 'metrics=[eval/accuracy:gain,reward:last:5]' \
        'expect=[higher,not_higher]' margin=0.05 expect_sd=lower

Without ``metrics=``, the comparison of data=mixture runs (rlpost/data/mixture.py) also reports each source's
``eval/<source>/accuracy`` and ``eval/<source>/reward`` after the pooled ones (``source_metrics``).

Writes ``compare.md``, ``compare.tex``, ``compare.json`` and ``compare.png`` into ``out`` (default: the
multirun directory, or the first run's parent) and prints the markdown tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError

if TYPE_CHECKING:
    from rlpost.analysis.reductions import MetricSpec


@dataclass(frozen=True)
class CompareSettings:
    runs: list[str] = field(default_factory=list)
    dir: str | None = None
    metrics: list[str] = field(default_factory=lambda: ["eval/accuracy", "eval/reward"])
    curves: list[str] = field(default_factory=lambda: ["reward", "eval/accuracy"])
    x_axis: str = "step"
    out: str | None = None
    baseline: str | None = None
    expect: str | list[str | None] | None = None
    margin: float | list[float | None] | None = None
    expect_sd: str | list[str | None] | None = None


def paths(s: CompareSettings) -> list[Path]:
    return [Path(p).expanduser() for p in ([s.dir] if s.dir else []) + list(s.runs)]


def check(s: CompareSettings, overrides: list[str]) -> CompareSettings:
    from rlpost.analysis.compare import X_AXES, duplicate_seeds, find_baseline, find_runs, group_methods

    if not s.runs and not s.dir:
        raise ConfigError("nothing to compare: give runs=[<run dir>,...] or dir=<multirun dir>.")
    if s.x_axis not in X_AXES:
        raise ConfigError(f"Invalid x_axis={s.x_axis!r}. Valid choices: {', '.join(X_AXES)}.")
    specs = check_metrics(s)  # before any folder is read
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
    if s.baseline is not None:
        methods = group_methods(jobs)
        try:
            find_baseline(methods, s.baseline, paths(s))
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for m in methods:
            if seeds := duplicate_seeds(m):
                raise ConfigError(
                    f"arm {m.label!r} has more than one run with seed {seeds[0]}: the runs cannot be paired by seed "
                    "with the baseline. Give each seed once."
                )
    logged = {k for j in jobs for r in j.rows for k in r} | {k for j in jobs for k in j.summary.get("after", {})}
    missing = [m.key for m in specs if m.key not in logged]
    if missing:
        raise ConfigError(f"metrics {missing} are logged by none of the runs. Logged: {', '.join(sorted(logged))}.")
    return s


def check_metrics(s: CompareSettings) -> list[MetricSpec]:
    """The metrics entries, ``expect``, ``margin`` and ``expect_sd``; ConfigError naming the key otherwise."""
    from rlpost.analysis.reductions import parse_metric
    from rlpost.analysis.stats import EXPECTATIONS, MARGINED

    specs = []
    for i, text in enumerate(s.metrics):
        try:
            specs.append(parse_metric(text))
        except ValueError as err:
            raise ConfigError(f"metrics[{i}]={err}") from None
    n = len(specs)
    per_metric: dict[str, list] = {}
    for key in ("expect", "margin", "expect_sd"):
        value = getattr(s, key)
        if isinstance(value, list) and len(value) != n:
            raise ConfigError(
                f"{key} has {len(value)} entries for {n} metrics: give one value for all, or one per metric in order."
            )
        per_metric[key] = value if isinstance(value, list) else [value] * n
    for key in ("expect", "expect_sd"):
        for i, value in enumerate(per_metric[key]):
            if value is not None and value not in EXPECTATIONS:
                where = f"{key}[{i}]" if isinstance(getattr(s, key), list) else key
                raise ConfigError(f"Invalid value {where}={value!r}. Valid choices: {', '.join(EXPECTATIONS)}.")
    if (s.expect is not None or s.expect_sd is not None) and s.baseline is None:
        raise ConfigError("expect and expect_sd judge differences against a baseline: set baseline=<arm>.")
    for i, (margin, e, e_sd) in enumerate(zip(per_metric["margin"], per_metric["expect"], per_metric["expect_sd"])):
        if margin is not None and margin < 0:
            raise ConfigError(f"margin={margin} must be >= 0.")
        if margin is None and (e in MARGINED or e_sd in MARGINED):
            claim = e if e in MARGINED else e_sd
            raise ConfigError(
                f"{specs[i].text!r}: a claim of {claim} needs an equality margin: set margin=<m> "
                "(bench/EVIDENCE.md: 0.05 for held-out accuracy and rewards in [0, 1])."
            )
    if s.margin is not None and not isinstance(s.margin, list):
        if not any(e in MARGINED for e in per_metric["expect"] + per_metric["expect_sd"]):
            raise ConfigError(
                f"margin={s.margin} is used only by expect=equal, not_higher or not_lower, and no metric expects one."
            )
    return specs


def source_metrics(s: CompareSettings, overrides: list[str]) -> list[str]:
    """``metrics``, and when they were not given (nor ``expect``, ``margin`` or ``expect_sd`` as per-metric lists),
    after each pooled ``eval/accuracy`` / ``eval/reward`` entry the same metric of every source of the data=mixture
    runs compared (``eval/<source>/accuracy``, read from each run's config.yaml, in the order the runs list them)."""
    import yaml

    from rlpost.analysis.compare import find_runs

    given = any(o.lstrip("+").split("=", 1)[0] == "metrics" for o in overrides)
    if given or any(isinstance(getattr(s, k), list) for k in ("expect", "margin", "expect_sd")):
        return list(s.metrics)
    names: list[str] = []
    for job in find_runs(paths(s)):
        config = job.path / "config.yaml"
        data = (yaml.safe_load(config.read_text()) or {}).get("data") or {} if config.is_file() else {}
        for source in data.get("sources") or [] if isinstance(data, dict) else []:
            if isinstance(source, dict) and (name := source.get("name") or source.get("data")) not in names:
                names.append(str(name))
    out = []
    for entry in s.metrics:
        out.append(entry)
        key, _, reduction = entry.partition(":")
        if key in ("eval/accuracy", "eval/reward"):
            out += [f"eval/{n}/{key.removeprefix('eval/')}" + (f":{reduction}" if reduction else "") for n in names]
    return out


def run(s: CompareSettings, output_dir: str, overrides: list[str]) -> int:
    from rlpost.analysis.compare import write_comparison

    first = paths(s)[0]
    out = Path(s.out).expanduser() if s.out else first if s.dir else first.parent
    metrics = source_metrics(s, overrides)
    result = write_comparison(
        paths(s), metrics, list(s.curves), s.x_axis, out, s.baseline, s.expect, s.margin, s.expect_sd
    )
    print(result["markdown"])
    written = [out / "compare.md", out / "compare.tex", out / "compare.json"]
    written += [result["plot"]] if result["plot"] else []
    print("written: " + ", ".join(str(p) for p in written))
    return 0


APP = tool("compare", "compare", CompareSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
