"""``rlpost sft [overrides] [-m]``: supervised fine-tuning (rlpost/sft/train.py) as a Hydra app on ``conf/sft.yaml``.

Through the launch path (rlpost/app.py) every job is composed and built once (``build_job``: settings, rows,
targets, the evaluation view) before Hydra starts, so bad input exits with code 2 before any model loads or any
run directory is made. Then, before the first job, as for ``rlpost train`` (rlpost/tools/train.py): ``resume=``
points ``hydra.run.dir`` at the run to continue (a multirun's ``resume=auto``: ``hydra.sweep.dir`` at the sweep
to finish), the run directory is claimed (rlpost/runs/claim.py), and a search sweep checks that every job can
return ``eval.objective``. A preempted job exits with code 75.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rlpost.app import App, Job, launch
from rlpost.core.errors import RunStopped
from rlpost.sft.config import SFTJob, build_job

CONFIG = "sft"  # conf/sft.yaml


def build(cfg: Any, overrides: list[str]) -> SFTJob:
    return build_job(cfg)


def prelaunch(jobs: list[Job], overrides: list[str], multirun: bool) -> list[str]:
    """Before Hydra starts: the search objective, the resumed or claimed run (or sweep) directory."""
    from rlpost.evaluation.objective import check_objective
    from rlpost.tools.train import resumed_directory

    if multirun and any(o.split("=", 1)[0] == "hydra/sweeper" for o in overrides):  # a search sweep
        for job in jobs:
            check_objective(job.built.run.settings.eval)
    key, named = resumed_directory(jobs, overrides, multirun)
    return [f"{key}={claim_directory(jobs, key, named)}"]


def claim_directory(jobs: list[Job], key: str, named: str | None) -> Path:
    """``named`` (given, or the run ``resume=`` continues), else a fresh folder where conf/sft.yaml's pattern points."""
    from omegaconf import OmegaConf

    from rlpost.app import compose
    from rlpost.runs.claim import claim_fresh, claim_named

    if named:
        return claim_named(named, key)
    return claim_fresh(OmegaConf.select(compose(jobs[0].overrides, CONFIG, hydra_node=True), key))


def run(job: SFTJob, cfg: Any, output_dir: str, overrides: list[str]) -> float | None:
    """One Hydra job: train, print the held-out numbers before -> after; returns the search objective."""
    from hydra.core.hydra_config import HydraConfig

    from rlpost.evaluation.objective import objective_value
    from rlpost.launch.sweep_resume import skip_finished_job
    from rlpost.sft.train import train_sft

    try:
        summary = skip_finished_job(cfg, HydraConfig.get()) or train_sft(job, cfg, output_dir, overrides)
    except RunStopped as err:  # disk full, run directory removed
        print(f"rlpost: stopped: {err}", file=sys.stderr)
        sys.exit(RunStopped.exit_code)
    if summary.get("preempted"):  # SIGTERM/SIGINT -> checkpoint saved, exit code 75
        from rlpost.runs.preemption import EXIT_PREEMPTED

        print(f"rlpost: preempted by {summary['preempted']}; checkpoint {summary['checkpoint']}", file=sys.stderr)
        sys.exit(EXIT_PREEMPTED)
    before, after = summary.get("before", {}), summary.get("after", {})
    print(f"run directory: {summary['run_dir']}")
    per_set = [f"eval/{s.cfg.name}/{m}" for s in job.run.eval_sets for m in ("accuracy", "reward")]
    for key in ("eval/accuracy", "eval/reward", "eval/mean_length", *per_set):
        if key in after:
            print(f"  {key:<18} {before.get(key, float('nan')):.3f} -> {after[key]:.3f}")
    print(f"  {summary['steps']} steps, {summary.get('seconds_per_step', 0.0):.2f} s/step")
    return objective_value(summary, job.run.settings.eval.objective)


APP = App(command="sft", config_name=CONFIG, build=build, run=run, prelaunch=prelaunch)


def main(args: list[str]) -> int:
    return launch(APP, args)
