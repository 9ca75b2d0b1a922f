"""``rlpost compare``: methods compared across seeds, with intervals a reviewer accepts (rlpost/analysis/stats.py),
and, against a named baseline arm, the seed-paired differences and verdicts of bench/EVIDENCE.md section 1.

Input: run directories, or multirun directories whose job folders are runs (rlpost/analysis/sweep.py reads
both). A *method* (an *arm*) is the set of runs whose overrides agree once ``seed`` (and where a run was
written, ``hydra.run.dir``, ``hydra.sweep.dir``, ``resume``) is dropped: its label is the overrides that
tell the methods apart. Each entry of ``metrics`` is ``<key>[:<reduction>]`` (rlpost/analysis/reductions.py:
``final`` by default, ``last:<k>``, ``mean``, ``max``, ``min``, ``first_above:<v>[:<w>]``,
``first_below:<v>[:<w>]``, ``gain``): one number per run. For each method and metric, over its runs: n,
mean, IQM, the percentile-bootstrap 95% interval of the mean, and the across-seed standard deviation
(n - 1) with its seed-bootstrap 95% interval (10,000 resamples, fixed seed: the same runs give the same
interval).

With ``baseline=<arm>`` (its label, or a ``runs``/``dir`` entry whose runs form one arm), for every other
arm and metric, **the seed-paired difference**: the runs of the arm and of the baseline with the same seed
are paired (each seed's runs share data and start); the effect is the mean over the paired seeds of arm
minus baseline. Its 95% interval:

- *seeds, then prompts* (two-level bootstrap, stats.two_level_bootstrap_ci) where the metric is a mean over
  the held-out prompts of ``eval_items.json`` (``eval/accuracy``: each prompt's ``correct``;
  ``eval/reward``: its ``reward``; a data=mixture run's ``eval/<source>/accuracy`` and ``eval/<source>/reward``:
  the same fields of the items whose ``source`` is that source), read at the end of the run (``final``) or as after minus before
  (``gain``, with ``eval_items_before.json``), and every paired run has the files. Per seed s and
  prompt i scored in both runs, e_si = arm_si - baseline_si (for ``gain``: the arm's after minus before
  minus the baseline's); the effect is mean_s (mean_i e_si), which can differ from the difference of the
  summary values when a run left a prompt unscored. Each resample draws the seeds with replacement, then
  each drawn seed's prompts with replacement.
- *seeds* otherwise (a training metric, a reduction, a metric that is not a mean over prompts): the
  per-seed differences d_s = arm_s - baseline_s resampled (stats.bootstrap_ci).

No interval and no verdict with fewer than 2 paired seeds. Given ``expect`` (``higher``, ``lower``,
``equal``, ``not_higher``, ``not_lower``; one for all metrics or one per metric) and, for the last three, a
``margin``, each difference gets the verdict of stats.verdict: reproduced, opposite or null. The paired
per-prompt test (McNemar's exact test for 0/1 scores, the exact sign test otherwise, prompts pooled over
the paired seeds) is given beside it where the metric has items, and the pairwise test table compares each
arm with the baseline (without a baseline: every two methods).

Equal compute: besides the runs as they ran (``run``), every difference is read at equal steps (``step``)
and, with ``x_axis=tokens|flops|seconds``, at equal x. For each seed the budget is the baseline run's total
(its last step, or its cumulative x at its end), or the arm run's total where that is smaller, so that both
runs of the seed are read at the same budget: each run's series is cut where its cumulative x reaches the
budget, the value at that point linearly interpolated between the two logged points around it
(reductions.read_at), and the reduction is applied to the cut series (``first_above``/``first_below`` count
steps: equal steps only). A cut reading is resampled over seeds (the item files hold the end of the run).
Where every paired run ended exactly at its budget the reading is the run's own (the JSON says
``same_as_run`` and the markdown leaves the row out).

The spread: per arm and metric the SD over seeds; against the baseline, the difference of the two SDs
over the paired seeds (arm minus baseline) with the 95% interval of a seed bootstrap that resamples the
pairs together (stats.paired_bootstrap_ci), its verdict under ``expect_sd``, and the ratio of the SDs
(a point value: with 3 seeds one resample in 9 draws a single seed thrice, where both SDs are 0 and the
ratio has no value, so its interval is not given; the difference's is the test).

Curves (``compare.png``): one panel per metric key, one line per method (the mean over its seeds at
each logged step) with a band for the bootstrap 95% interval at that step (1,000 resamples); the
baseline's line is black and thicker. The x axis is ``step``, ``tokens`` (TRL's cumulative
``num_tokens``, prompts included), ``flops`` (the run's cumulative ``train_flops`` model-FLOPs estimate,
rlpost/models/flops.py) or ``seconds`` (cumulative ``step_time``), averaged over the seeds at each step,
so methods can be compared at equal generated tokens, equal compute or equal wall-clock time. Written:
``compare.md``, ``compare.tex``, ``compare.png`` and ``compare.json`` (every number above).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlpost.analysis.plots import save_figure
from rlpost.analysis.reductions import (
    THRESHOLDS,
    X_AXES,
    MetricSpec,
    Reading,
    final_x,
    parse_metric,
    read_at,
    reduce,
    with_x,
)
from rlpost.analysis.stats import (
    MARGINED,
    PairedTest,
    bootstrap_ci,
    iqm,
    paired_bootstrap_ci,
    sd,
    sd_difference,
    sign_test,
    two_level_bootstrap_ci,
    verdict,
)
from rlpost.analysis.sweep import Job, job_dirs, load_job, split_overrides
from rlpost.runs.rundir import EVAL_ITEMS, EVAL_ITEMS_BEFORE

__all__ = ["X_AXES", "MetricSpec", "parse_metric"]

IGNORED_KEYS = ("seed", "hydra.run.dir", "hydra.sweep.dir", "resume")  # not what a method is
ITEM_FIELDS = {"eval/accuracy": "correct", "eval/reward": "reward"}  # metric -> its per-prompt field in eval_items
MIN_SEEDS = 2  # paired seeds below which a difference gets no interval and no verdict


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
    sd: float | None = None  # across seeds (n - 1); None with one run
    sd_low: float | None = None  # seed-bootstrap 95% interval of the SD
    sd_high: float | None = None
    censored: int = 0  # runs whose first_above / first_below never got there
    values: dict[int, float] = field(default_factory=dict)  # seed -> the run's value


@dataclass(frozen=True)
class Difference:
    """Arm minus baseline on one metric, paired by seed, read at one point (module docstring)."""

    arm: str
    baseline: str
    metric: str  # the metrics entry, e.g. eval/accuracy:gain
    at: str  # run (as each ran) | step (the baseline's last step) | tokens | flops | seconds (the baseline's total);
    # at step, tokens, flops, seconds both runs of a seed are read at the smaller of their two totals
    seeds: list[int]  # paired seeds with a reading in both
    budgets: list[float | None]  # per paired seed: the step or x both runs are read at (None: at ``run``)
    arm_values: list[float]  # per paired seed
    baseline_values: list[float]
    differences: list[float]  # per paired seed (from the prompts where the scheme is seeds+prompts)
    mean: float | None  # the effect: mean of ``differences``
    low: float | None  # 95% interval (None: fewer than 2 paired seeds)
    high: float | None
    scheme: str  # "seeds+prompts" | "seeds" | "-"
    prompts: int  # matched prompts over all paired seeds (seeds+prompts)
    test: PairedTest | None  # McNemar / sign test on the pooled prompts (read at the run's end only)
    expect: str | None
    margin: float | None
    verdict: str | None  # reproduced | opposite | null; None without expect or interval
    unpaired: list[int]  # seeds one side lacks, or without a reading on one side (never reached the budget)
    censored: int  # paired runs (either side) whose threshold was never crossed
    same_as_run: bool  # every paired run ended at the budget: the reading equals ``run``


@dataclass(frozen=True)
class Spread:
    """The SDs over the paired seeds, arm minus baseline, with the paired seed-bootstrap interval."""

    arm: str
    baseline: str
    metric: str
    seeds: list[int]
    sd_arm: float | None
    sd_baseline: float | None
    difference: float | None
    low: float | None
    high: float | None
    ratio: float | None  # sd_arm / sd_baseline (None when the baseline's SD is 0)
    expect: str | None
    margin: float | None
    verdict: str | None


@dataclass(frozen=True)
class Expectation:
    """What a row of bench/EVIDENCE.md expects of one metric (``expect``, ``margin``, ``expect_sd``)."""

    expect: str | None = None
    margin: float | None = None
    expect_sd: str | None = None


def find_runs(paths: list[Path]) -> list[Job]:
    """Each path is a run (metrics.jsonl or summary.json in it) or a multirun directory of runs."""
    jobs = []
    for path in paths:
        found = [path] if is_run(path) else job_dirs(path)
        jobs += [replace(load_job(p), name=str(p)) for p in found]  # unique names across directories
    return jobs


def is_run(path: Path) -> bool:
    return (path / "summary.json").is_file() or (path / "metrics.jsonl").is_file()


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


def find_baseline(methods: list[Method], baseline: str, paths: list[Path]) -> Method:
    """The arm ``baseline`` names: its label, or a ``runs``/``dir`` entry whose runs all form that one arm.
    ValueError (with the arms) otherwise."""
    for m in methods:
        if m.label == baseline:
            return m
    target = Path(baseline).expanduser().resolve()
    for path in paths:
        if path.expanduser().resolve() != target:
            continue
        runs = {str(p) for p in ([path] if is_run(path) else job_dirs(path))}
        owners = [m for m in methods if any(j.name in runs for j in m.jobs)]
        if len(owners) == 1:
            return owners[0]
        raise ValueError(
            f"baseline={baseline!r}: its runs form {len(owners)} arms ({', '.join(repr(m.label) for m in owners)}); "
            "name one of them."
        )
    arms = ", ".join(repr(m.label) for m in methods)
    raise ValueError(f"baseline={baseline!r} is no arm. Arms: {arms} (or a runs/dir entry whose runs form one arm).")


def duplicate_seeds(method: Method) -> list[int]:
    seeds = [seed_of(j) for j in method.jobs]
    return sorted({s for s in seeds if seeds.count(s) > 1})


def final_value(job: Job, metric: str) -> float | None:
    points = job.series(metric)
    return points[-1][1] if points else None


def reading(job: Job, spec: MetricSpec) -> Reading | None:
    """The run's one number for ``spec`` (reductions.reduce); None when it logged nothing usable."""
    found = reduce(job.series(spec.key), spec)
    return found if found is not None and math.isfinite(found.value) else None


def cell(values: list[float], censored: int = 0, seeds: Sequence[int] = ()) -> Cell | None:
    if not values:
        return None
    low, high = bootstrap_ci(values)
    sd_value = sd_low = sd_high = None
    if len(values) > 1:
        sd_value = sd(values)
        sd_low, sd_high = bootstrap_ci(values, statistic=lambda x: float(np.std(x, ddof=1)))
    return Cell(
        n=len(values),
        mean=sum(values) / len(values),
        iqm=iqm(values),
        low=low,
        high=high,
        sd=sd_value,
        sd_low=sd_low,
        sd_high=sd_high,
        censored=censored,
        values=dict(zip(seeds, values)),
    )


def _specs(metrics: Sequence[str | MetricSpec]) -> list[MetricSpec]:
    return [m if isinstance(m, MetricSpec) else parse_metric(m) for m in metrics]


def table(methods: list[Method], metrics: Sequence[str | MetricSpec]) -> dict[str, dict[str, Cell | None]]:
    """{method label: {metrics entry: its Cell over the method's runs (None: no run logged it)}}."""
    out: dict[str, dict[str, Cell | None]] = {}
    for m in methods:
        out[m.label] = {}
        for spec in _specs(metrics):
            read = [(seed_of(j), r) for j in m.jobs if (r := reading(j, spec)) is not None]
            out[m.label][spec.text] = cell(
                [r.value for _, r in read], sum(r.censored for _, r in read), [s for s, _ in read]
            )
    return out


def item_rows(job: Job, name: str = EVAL_ITEMS) -> list[dict] | None:
    path = job.path / name
    return json.loads(path.read_text()) if path.is_file() else None


def item_scores(job: Job) -> dict[int, float] | None:
    rows = item_rows(job)
    if rows is None:
        return None
    return {int(r["index"]): value for r in rows if (value := _item_value(r)) is not None}


def _item_value(row: dict) -> float | None:
    """What a held-out prompt is compared on: correct (1/0) with a correctness criterion, else the reward."""
    key = "correct" if "correct" in row else "score" if "score" in row else "reward"
    return None if row.get(key) is None else float(row[key])


def item_field(key: str) -> tuple[str, str | None] | None:
    """The eval_items field of a metric that is a mean over held-out prompts, and the data source whose prompts
    it covers: ``eval/accuracy`` -> (correct, None); a data=mixture run's ``eval/<source>/accuracy`` -> (correct,
    <source>) (its items carry their ``source``); None for any other metric."""
    if key in ITEM_FIELDS:
        return ITEM_FIELDS[key], None
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == "eval" and f"eval/{parts[2]}" in ITEM_FIELDS:
        return ITEM_FIELDS[f"eval/{parts[2]}"], parts[1]
    return None


def prompt_values(job: Job, spec: MetricSpec) -> dict[int, float] | None:
    """{prompt index: the run's per-prompt value of ``spec``} (module docstring), or None without the files (or,
    for one source of a mixture, when the items name no such source: an eval set's metric)."""
    found = item_field(spec.key)
    if found is None or not spec.per_prompt:
        return None
    name, source = found

    def values(file: str) -> dict[int, float] | None:
        rows = item_rows(job, file)
        if rows is None:
            return None
        if source is not None:
            rows = [r for r in rows if r.get("source") == source]
            if not rows:
                return None
        return {int(r["index"]): float(r[name]) for r in rows if r.get(name) is not None}

    after = values(EVAL_ITEMS)
    if spec.reduction == "final" or after is None:
        return after
    before = values(EVAL_ITEMS_BEFORE)
    return None if before is None else {i: after[i] - before[i] for i in sorted(set(after) & set(before))}


def paired_runs(arm: Method, baseline: Method) -> tuple[list[tuple[int, Job, Job]], list[int]]:
    """([(seed, arm run, baseline run)] for the seeds both have, in seed order; the seeds only one has)."""
    a = {seed_of(j): j for j in arm.jobs}
    b = {seed_of(j): j for j in baseline.jobs}
    return [(s, a[s], b[s]) for s in sorted(set(a) & set(b))], sorted(set(a) ^ set(b))


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


def paired_tests(methods: list[Method], baseline: Method | None = None) -> list[tuple[str, str, PairedTest | None]]:
    """Each arm against the baseline (arm first), or, without one, every two methods."""
    if baseline is not None:
        return [(m.label, baseline.label, paired_test(m, baseline)) for m in methods if m is not baseline]
    return [(a.label, b.label, paired_test(a, b)) for a, b in combinations(methods, 2)]


def _read(job: Job, spec: MetricSpec, at: str, budget: float | None) -> tuple[Reading | None, bool]:
    """(the run's reading at ``at``, whether it is the whole run's)."""
    if at == "run":
        return reading(job, spec), True
    if budget is None:
        return None, False
    cut = read_at(with_x(job, spec.key, at), budget)
    if cut is None:
        return None, False
    series, whole = cut
    found = reduce(series, spec)
    return (found if found is not None and math.isfinite(found.value) else None), whole


def difference(
    arm: Method, baseline: Method, spec: MetricSpec, at: str = "run", expected: Expectation = Expectation()
) -> Difference | None:
    """Arm minus baseline on ``spec``, paired by seed, read at ``at`` (module docstring); None: a threshold
    reduction read at equal tokens, flops or seconds (it counts steps)."""
    if spec.reduction in THRESHOLDS and at not in ("run", "step"):
        return None
    pairs, unpaired = paired_runs(arm, baseline)
    seeds: list[int] = []
    a_values: list[float] = []
    b_values: list[float] = []
    jobs: list[tuple[Job, Job]] = []
    budgets: list[float | None] = []
    censored, whole_runs = 0, True
    for seed, ja, jb in pairs:
        budget = None
        if at != "run":  # the smaller of the two totals: the baseline's, unless the arm's own is smaller
            xa, xb = final_x(ja, at), final_x(jb, at)
            budget = None if xa is None or xb is None else min(xa, xb)
        ra, whole_a = _read(ja, spec, at, budget)
        rb, whole_b = _read(jb, spec, at, budget)
        if ra is None or rb is None:
            unpaired.append(seed)
            continue
        whole = whole_a and whole_b
        budgets.append(budget)
        seeds.append(seed)
        a_values.append(ra.value)
        b_values.append(rb.value)
        jobs.append((ja, jb))
        censored += ra.censored + rb.censored
        whole_runs &= whole
    scale = max((abs(v) for v in a_values + b_values), default=0.0)
    differences = [snap(x - y, scale) for x, y in zip(a_values, b_values)]
    groups = _prompt_differences(jobs, spec) if whole_runs else None
    if groups is not None:
        differences = [float(np.mean(g)) for g in groups]
    mean = snap(float(np.mean(differences)), scale) if differences else None
    low = high = None
    if len(differences) >= MIN_SEEDS:
        low, high = two_level_bootstrap_ci(groups) if groups is not None else bootstrap_ci(differences)
        low, high = snap(low, scale), snap(high, scale)
    test = _prompt_test(jobs, spec) if groups is not None else None
    call = None
    if expected.expect is not None and low is not None and high is not None:
        call = verdict(low, high, expected.expect, expected.margin)
    return Difference(
        arm=arm.label,
        baseline=baseline.label,
        metric=spec.text,
        at=at,
        seeds=seeds,
        budgets=budgets,
        arm_values=a_values,
        baseline_values=b_values,
        differences=differences,
        mean=mean,
        low=low,
        high=high,
        scheme="-" if low is None else "seeds+prompts" if groups is not None else "seeds",
        prompts=sum(len(g) for g in groups) if groups is not None else 0,
        test=test,
        expect=expected.expect,
        margin=expected.margin if expected.expect in MARGINED else None,
        verdict=call,
        unpaired=sorted(unpaired),
        censored=censored,
        same_as_run=at != "run" and whole_runs and bool(seeds),
    )


def _prompt_differences(jobs: list[tuple[Job, Job]], spec: MetricSpec) -> list[list[float]] | None:
    """Per paired seed, arm minus baseline on each prompt both scored; None unless every run has the items."""
    if not jobs:
        return None
    groups = []
    for ja, jb in jobs:
        pa, pb = prompt_values(ja, spec), prompt_values(jb, spec)
        if pa is None or pb is None:
            return None
        common = sorted(set(pa) & set(pb))
        if not common:
            return None
        groups.append([pa[i] - pb[i] for i in common])
    return groups


def _prompt_test(jobs: list[tuple[Job, Job]], spec: MetricSpec) -> PairedTest | None:
    xs, ys = [], []
    for ja, jb in jobs:
        pa, pb = prompt_values(ja, spec), prompt_values(jb, spec)
        if pa is None or pb is None:
            return None
        common = sorted(set(pa) & set(pb))
        xs += [pa[i] for i in common]
        ys += [pb[i] for i in common]
    return sign_test(xs, ys) if xs else None


def spread(arm: Method, baseline: Method, spec: MetricSpec, expected: Expectation = Expectation()) -> Spread:
    """The SDs over the seeds both arms have a reading for, arm minus baseline (module docstring)."""
    pairs, _ = paired_runs(arm, baseline)
    read = [(s, reading(ja, spec), reading(jb, spec)) for s, ja, jb in pairs]
    kept = [(s, ra.value, rb.value) for s, ra, rb in read if ra is not None and rb is not None]
    seeds, a, b = [s for s, _, _ in kept], [x for _, x, _ in kept], [y for _, _, y in kept]
    if len(kept) < MIN_SEEDS:
        return Spread(arm.label, baseline.label, spec.text, seeds, None, None, None, None, None, None,
                      expected.expect_sd, None, None)  # fmt: skip
    sd_a, sd_b = sd(a), sd(b)
    scale = max(abs(v) for v in a + b)
    low, high = (snap(x, scale) for x in paired_bootstrap_ci(a, b, sd_difference))
    margin = expected.margin if expected.expect_sd in MARGINED else None
    call = verdict(low, high, expected.expect_sd, margin) if expected.expect_sd is not None else None
    return Spread(
        arm.label,
        baseline.label,
        spec.text,
        seeds,
        sd_a,
        sd_b,
        snap(sd_a - sd_b, scale),
        low,
        high,
        sd_a / sd_b if sd_b > 0 else None,
        expected.expect_sd,
        margin,
        call,
    )


@dataclass
class Paired:
    """Everything compared against the baseline."""

    baseline: str
    differences: list[Difference]
    spreads: list[Spread]


def against_baseline(
    methods: list[Method],
    baseline: Method,
    specs: list[MetricSpec],
    x_axis: str,
    expected: Sequence[Expectation],
) -> Paired:
    """Every other arm against ``baseline`` on every metric: at ``run``, ``step`` and, unless it is ``step``,
    ``x_axis``; and the spreads."""
    ats = ["run", "step"] + ([x_axis] if x_axis != "step" else [])
    differences, spreads = [], []
    for arm in (m for m in methods if m is not baseline):
        for spec, exp in zip(specs, expected):
            differences += [d for at in ats if (d := difference(arm, baseline, spec, at, exp)) is not None]
            spreads.append(spread(arm, baseline, spec, exp))
    return Paired(baseline.label, differences, spreads)


def snap(x: float, scale: float) -> float:
    """0 for a difference within float rounding of the values it came from (``1e-9 * scale``): 0.6 + 0.1 minus
    0.35 + 0.1 is not exactly 0.25, and a zero-width interval at 1e-17 must not pass for one that excludes 0."""
    return 0.0 if abs(x) <= 1e-9 * scale else x


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text  # no -0.000


def _fmt(c: Cell | None, digits: int = 3) -> tuple[str, str, str]:
    if c is None:
        return "-", "-", "-"
    return f"{c.mean:.{digits}f}", f"{c.iqm:.{digits}f}", f"[{c.low:.{digits}f}, {c.high:.{digits}f}]"


def _sd(c: Cell | None, digits: int = 3) -> str:
    if c is None or c.sd is None:
        return "-"
    return f"{c.sd:.{digits}f} [{_num(c.sd_low, digits)}, {_num(c.sd_high, digits)}]"


def _interval(low: float | None, high: float | None, digits: int = 3) -> str:
    return "-" if low is None or high is None else f"[{_num(low, digits)}, {_num(high, digits)}]"


AT_TEXT = {"run": "end of run", "step": "equal steps", "tokens": "equal tokens", "flops": "equal FLOPs",
           "seconds": "equal seconds"}  # fmt: skip


def _expected(expect: str | None, margin: float | None) -> str:
    if expect is None:
        return "-"
    return f"{expect} (m={margin:g})" if margin is not None else expect


def to_markdown(
    cells: dict[str, dict[str, Cell | None]],
    metrics: Sequence[str],
    tests: list[tuple[str, str, PairedTest | None]],
    paired: Paired | None = None,
) -> str:
    header = ["method", "runs"] + [f"{k} {part}" for k in metrics for part in ("mean", "IQM", "95% CI", "SD [95% CI]")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in cells.items():
        n = max((c.n for c in row.values() if c is not None), default=0)
        values = [v for k in metrics for v in (*_fmt(row[k]), _sd(row[k]))]
        lines.append("| " + " | ".join([_md(label), str(n), *values]) + " |")
    censored = [
        f"{label}: {k} {c.censored}" for label, row in cells.items() for k, c in row.items() if c and c.censored
    ]
    if censored:
        lines += [
            "",
            "Runs that never crossed their threshold (counted at the step after their last): " + "; ".join(censored),
        ]
    if paired is not None:
        lines += ["", *paired_markdown(paired)]
    lines += ["", "| method A | method B | A better | B better | ties | test | p |", "|---|---|---|---|---|---|---|"]
    for a, b, t in tests:
        cells_ab = (
            ["-"] * 5 if t is None else [str(t.a_better), str(t.b_better), str(t.ties), t.name, f"{t.p_value:.4g}"]
        )
        lines.append("| " + " | ".join([_md(a), _md(b), *cells_ab]) + " |")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def paired_markdown(paired: Paired) -> list[str]:
    """The difference table and the spread table against the baseline."""
    lines = [
        f"Against the baseline `{paired.baseline}` (arm minus baseline, paired by seed; verdicts: bench/EVIDENCE.md section 1):",
        "",
        "| arm | metric | read at | seeds | arm mean | baseline mean | difference | 95% CI | CI resamples | test | p | expected | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for d in paired.differences:
        if d.same_as_run:
            continue
        test = ("-", "-") if d.test is None else (d.test.name, f"{d.test.p_value:.4g}")
        row = [
            _md(d.arm),
            d.metric,
            AT_TEXT[d.at],
            str(len(d.seeds)),
            _num(float(np.mean(d.arm_values)) if d.arm_values else None),
            _num(float(np.mean(d.baseline_values)) if d.baseline_values else None),
            _num(d.mean),
            _interval(d.low, d.high),
            d.scheme if d.scheme != "seeds+prompts" else f"seeds+prompts ({d.prompts})",
            *test,
            _expected(d.expect, d.margin),
            d.verdict or "-",
        ]
        lines.append("| " + " | ".join(row) + " |")
        if d.unpaired:
            notes.append(f"{d.arm}, {d.metric} at {AT_TEXT[d.at]}: no pair for seeds {d.unpaired}")
        if d.censored:
            notes.append(f"{d.arm}, {d.metric} at {AT_TEXT[d.at]}: {d.censored} censored runs")
    lines += [
        "",
        "| arm | metric | seeds | arm SD | baseline SD | SD difference | 95% CI | SD ratio | expected | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in paired.spreads:
        row = [_md(s.arm), s.metric, str(len(s.seeds)), _num(s.sd_arm), _num(s.sd_baseline), _num(s.difference),
               _interval(s.low, s.high), _num(s.ratio), _expected(s.expect, s.margin), s.verdict or "-"]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return lines


def _tex(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        text = text.replace(char, escaped)
    return text


def to_latex(cells: dict[str, dict[str, Cell | None]], metrics: Sequence[str], paired: Paired | None = None) -> str:
    """Booktabs tables: per metric, mean with its 95% interval, the IQM and the SD across seeds; with a
    baseline, the paired differences."""
    cols = "l" + "ccc" * len(metrics)
    head = " & ".join(f"\\multicolumn{{3}}{{c}}{{{_tex(k)}}}" for k in metrics)
    sub = " & ".join("mean [95\\% CI] & IQM & SD [95\\% CI]" for _ in metrics)
    lines = [f"\\begin{{tabular}}{{{cols}}}", "\\toprule", f"method & {head} \\\\", f" & {sub} \\\\", "\\midrule"]
    for label, row in cells.items():
        parts = []
        for k in metrics:
            mean, middle, interval = _fmt(row[k])
            parts += [f"{mean} {interval}" if row[k] is not None else "-", middle, _sd(row[k])]
        lines.append(f"{_tex(label)} & " + " & ".join(parts) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if paired is not None:
        lines += [
            "",
            f"% arm minus baseline ({_tex(paired.baseline)}), paired by seed",
            "\\begin{tabular}{lllcccl}",
            "\\toprule",
            "arm & metric & read at & seeds & difference [95\\% CI] & $p$ & verdict \\\\",
            "\\midrule",
        ]
        for d in paired.differences:
            if d.same_as_run:
                continue
            p = "-" if d.test is None else f"{d.test.p_value:.3g}"
            value = _num(d.mean) + ("" if d.low is None else f" {_interval(d.low, d.high)}")
            cells_d = [_tex(d.arm), _tex(d.metric), _tex(AT_TEXT[d.at]), str(len(d.seeds)), value, p, d.verdict or "-"]
            lines.append(" & ".join(cells_d) + " \\\\")
        lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def to_json(
    methods: list[Method],
    specs: list[MetricSpec],
    cells: dict[str, dict[str, Cell | None]],
    tests: list[tuple[str, str, PairedTest | None]],
    paired: Paired | None,
    x_axis: str,
) -> str:
    """compare.json: every number of the tables, per seed where there is one (NaN and inf as null)."""
    document = {
        "x_axis": x_axis,
        "level": 0.95,
        "resamples": 10_000,
        "baseline": paired.baseline if paired else None,
        "arms": [
            {"label": m.label, "runs": [str(j.path) for j in m.jobs], "seeds": [seed_of(j) for j in m.jobs]}
            for m in methods
        ],  # fmt: skip
        "metrics": [asdict(s) for s in specs],
        "cells": {label: {k: asdict(c) if c else None for k, c in row.items()} for label, row in cells.items()},
        "tests": [{"a": a, "b": b, "test": asdict(t) if t else None} for a, b, t in tests],
        "differences": [asdict(d) for d in paired.differences] if paired else [],
        "spreads": [asdict(s) for s in paired.spreads] if paired else [],
    }
    return json.dumps(_finite(document), indent=2) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


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


def plot(
    methods: list[Method], keys: list[str], x_axis: str, out_file: Path, baseline: str | None = None
) -> Path | None:
    """compare.png: one panel per key with any data, mean line and 95% band per method (the baseline's black)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(k, [(m.label, curve(m, k, x_axis)) for m in methods]) for k in keys]
    panels = [(k, lines) for k, lines in panels if any(c[0] for _, c in lines)]
    if not panels:
        return None
    # the legend goes under the panels, one method per line: labels are override lists, often wider than a panel
    shown = {m.label: m.label + (" (baseline)" if m.label == baseline else "") for m in methods}
    names = [textwrap.fill(shown[m.label], 100, subsequent_indent="    ") for m in methods]
    legend_lines = sum(n.count("\n") + 1 for n in names)
    legend_h = 0.17 * legend_lines + 0.2  # inches at fontsize 7
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6 + legend_h), squeeze=False)
    for ax, (key, lines) in zip(axes[0], panels):
        for label, (x, mean, low, high) in lines:
            if x:
                style = {"color": "black", "linewidth": 2.5, "zorder": 3} if label == baseline else {}
                ax.plot(x, mean, label=label, **style)
                ax.fill_between(x, low, high, alpha=0.2, **({"color": "black"} if label == baseline else {}))
        ax.set_title(key)
        labels = {"step": "optimizer step", "tokens": "tokens (TRL num_tokens)", "flops": "model FLOPs (train_flops)"}
        ax.set_xlabel({**labels, "seconds": "seconds"}[x_axis])
    handles, labels = axes[0][0].get_legend_handles_labels()  # the first panel holds every method with data
    wrapped = dict(zip((m.label for m in methods), names))
    fig.legend(handles, [wrapped[label] for label in labels], loc="lower left", fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_h / (3.6 + legend_h), 1, 1))
    return save_figure(fig, out_file)


def expectations(
    n: int,
    expect: str | Sequence[str | None] | None,
    margin: float | Sequence[float | None] | None,
    expect_sd: str | Sequence[str | None] | None,
) -> list[Expectation]:
    """``expect``, ``margin`` and ``expect_sd``, each one value for every metric or one per metric, -> one
    Expectation per metric (their lengths are checked by rlpost/tools/compare.py)."""

    def each(value: Any) -> list[Any]:
        return list(value) if isinstance(value, (list, tuple)) else [value] * n

    return [Expectation(e, m, s) for e, m, s in zip(each(expect), each(margin), each(expect_sd))]


def write_comparison(
    paths: list[Path],
    metrics: Sequence[str | MetricSpec],
    curve_keys: list[str],
    x_axis: str,
    out_dir: Path,
    baseline: str | None = None,
    expect: str | Sequence[str | None] | None = None,
    margin: float | Sequence[float | None] | None = None,
    expect_sd: str | Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """compare.md, compare.tex, compare.json and compare.png into ``out_dir``; returns what they show."""
    from rlpost.runs.rundir import write_atomic

    specs = _specs(metrics)
    methods = group_methods(find_runs(paths))
    base = find_baseline(methods, baseline, paths) if baseline is not None else None
    cells = table(methods, specs)
    tests = paired_tests(methods, base)
    paired = None
    if base is not None:
        paired = against_baseline(methods, base, specs, x_axis, expectations(len(specs), expect, margin, expect_sd))
    texts = [s.text for s in specs]
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(cells, texts, tests, paired)
    write_atomic(out_dir / "compare.md", markdown)
    write_atomic(out_dir / "compare.tex", to_latex(cells, texts, paired))
    write_atomic(out_dir / "compare.json", to_json(methods, specs, cells, tests, paired, x_axis))
    png = plot(methods, curve_keys, x_axis, out_dir / "compare.png", base.label if base else None)
    return {"methods": methods, "cells": cells, "tests": tests, "paired": paired, "markdown": markdown, "plot": png}
