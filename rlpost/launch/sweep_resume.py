"""``resume=auto`` in a multirun: a killed sweep, relaunched with the same command line, finishes what
was not done and redoes nothing.

Job ``k`` of a sweep always runs in ``<sweep dir>/<k>`` (``hydra.sweep.subdir``), so its earlier attempt
is found by its number, as a SLURM array task finds its own:
- the folder's ``summary.json`` is that of a finished run (no ``preempted`` key): the job is skipped
  and returns the saved summary, so the sweep summary and an Optuna search still see its result;
- it holds a complete checkpoint: the job continues from it (``rlpost/train.py``, as a single run does);
- neither: the job starts afresh in that folder.

Which sweep: the one named by ``hydra.sweep.dir=``, else the latest folder under ``multirun/`` whose
job folders all hold this launch's settings for their job number; none: a fresh sweep. Before the first
job starts, the launch prints what each job will do.

Choices: a job folder whose ``config.yaml`` holds other settings (``resume`` ignored) is never
continued, skipped or overwritten: the launch stops with exit code 2 naming the first key that
differs (to change a sweep's settings, give it a new ``hydra.sweep.dir``). A search sweeper (Optuna)
picks a job's settings only when the job starts, so there the same check is made by each job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rlpost.core.errors import ConfigError
from rlpost.runs.checkpoints import IGNORED_KEYS, latest_checkpoint

FINISHED, CONTINUE, FRESH = "finished", "continue", "fresh"
PLAN_WORDS = (
    (FINISHED, "finished (skipped)", "finished (skipped)"),
    (CONTINUE, "continues from its checkpoint", "continue from their checkpoints"),
    (FRESH, "starts fresh", "start fresh"),
)
SWEEP_ROOT = "multirun"  # conf/config.yaml hydra.sweep.dir: multirun/<date>/<time>


def comparable_config(cfg: Any) -> dict[str, Any]:
    """A composed config as ``config.yaml`` stores it: resolved, secrets redacted, no ``hydra`` node."""
    from omegaconf import OmegaConf

    from rlpost.core.secrets import redact

    config = redact(OmegaConf.to_container(cfg, resolve=True))
    config.pop("hydra", None)
    return config


def first_difference(old: Any, new: Any, key: str = "") -> str | None:
    """The first dotted key whose value differs, as ``key: old -> new``; None when equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(old) | set(new), key=str):
            if not key and name in IGNORED_KEYS:
                continue
            found = first_difference(old.get(name, "(absent)"), new.get(name, "(absent)"), f"{key}.{name}".lstrip("."))
            if found:
                return found
        return None
    return None if old == new else f"{key or 'config'}: {old!r} -> {new!r}"


def saved_difference(job_dir: Path, config: dict[str, Any]) -> str | None:
    """How the settings saved in ``job_dir/config.yaml`` differ from ``config`` (None: same, or no file)."""
    from omegaconf import OmegaConf

    saved = job_dir / "config.yaml"
    if not saved.is_file():
        return None
    try:
        old = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file is a run we cannot vouch for
        return f"unreadable config.yaml ({type(err).__name__})"
    return first_difference(old, config)


def finished_summary(job_dir: Path) -> dict[str, Any] | None:
    """The ``summary.json`` of a run that finished (not one that was preempted), else None."""
    try:
        summary = json.loads((job_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and not summary.get("preempted") else None


def job_state(job_dir: Path, config: dict[str, Any]) -> tuple[str, str]:
    """What ``resume=auto`` does with job folder ``job_dir`` for a job with settings ``config``:
    ``(FINISHED | CONTINUE | FRESH, a few words)``. ConfigError when the folder holds other settings."""
    difference = saved_difference(job_dir, config)
    if difference:
        raise ConfigError(
            f"resume=auto: {job_dir} holds a run with other settings ({difference}); "
            "give the sweep a new hydra.sweep.dir to run these settings."
        )
    if finished_summary(job_dir) is not None:
        return FINISHED, "finished"
    checkpoint = latest_checkpoint(job_dir / "checkpoints")
    return (CONTINUE, checkpoint.name) if checkpoint else (FRESH, "fresh")


def sweep_plan(sweep_dir: Path, configs: list[dict[str, Any]]) -> str:
    """One line saying what each job will do, e.g. ``job 0 finished (skipped); job 1 continues from
    checkpoint-2; jobs 2-4 start fresh``; ConfigError when a job folder holds other settings."""
    states = [job_state(sweep_dir / str(num), config) for num, config in enumerate(configs)]
    parts = []
    for kind, one, many in PLAN_WORDS:
        nums = [num for num, (state, _) in enumerate(states) if state == kind]
        if nums:
            where = f" ({', '.join(f'{n}: {states[n][1]}' for n in nums)})" if kind == CONTINUE else ""
            parts.append(f"job {nums[0]} {one}{where}" if len(nums) == 1 else f"jobs {_ranges(nums)} {many}{where}")
    return "; ".join(parts)


def _ranges(nums: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    spans: list[list[int]] = []
    for num in nums:
        if spans and num == spans[-1][1] + 1:
            spans[-1][1] = num
        else:
            spans.append([num, num])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def matches(sweep_dir: Path, configs: list[dict[str, Any]]) -> bool:
    """Every job folder of ``sweep_dir`` that holds a config.yaml holds this launch's settings for its
    job number (and there is at least one)."""
    jobs = [d for d in sweep_dir.iterdir() if d.name.isdigit() and (d / "config.yaml").is_file()]
    return bool(jobs) and all(
        int(d.name) < len(configs) and not saved_difference(d, configs[int(d.name)]) for d in jobs
    )


def latest_matching_sweep(configs: list[dict[str, Any]], root: str = SWEEP_ROOT) -> Path | None:
    """The most recently written sweep folder under ``root`` that ``matches`` this launch, or None."""
    sweeps = {p.parent.parent for p in Path(root).glob("**/config.yaml") if p.parent.name.isdigit()}
    found = [s for s in sweeps if matches(s, configs)]
    latest = lambda s: max(p.stat().st_mtime for p in s.glob("*/config.yaml"))  # noqa: E731
    return max(found, key=latest) if found else None


def resolve_sweep_resume(
    configs: list[dict[str, Any]], sweep_dir: str | None, root: str = SWEEP_ROOT
) -> tuple[str | None, str]:
    """``resume=auto`` for a multirun whose jobs have settings ``configs`` (in job order), before Hydra
    starts: ``(the sweep folder to continue, or None for a fresh one; the message to print)``.
    ConfigError when a job folder holds a run with other settings."""
    if sweep_dir is None:
        found = latest_matching_sweep(configs, root)
        if found is None:
            return None, f"resume=auto: no earlier sweep under {root}/ has these settings; starting a fresh sweep."
        sweep_dir = str(found)
    return sweep_dir, f"resume=auto: sweep {sweep_dir}: {sweep_plan(Path(sweep_dir), configs)}."


def skip_finished_job(cfg: Any, hydra_cfg: Any) -> dict[str, Any] | None:
    """At the start of a multirun job with ``resume=auto`` (``hydra_cfg``: the job's Hydra config): the
    saved summary when the job's folder holds its finished run (the job is not run again), else None
    (training then continues from the folder's checkpoint, or starts fresh). ConfigError when the
    folder holds a run with other settings."""
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN or cfg.get("resume") != "auto":
        return None
    job_dir = Path(hydra_cfg.runtime.output_dir)
    state, _ = job_state(job_dir, comparable_config(cfg))
    if state != FINISHED:
        return None
    print(f"rlpost: resume=auto: job {hydra_cfg.job.num} finished earlier in {job_dir}; skipped", file=sys.stderr)
    return finished_summary(job_dir)
