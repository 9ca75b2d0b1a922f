"""``rlpost train [overrides] [-m]``: train a policy (rlpost/train.py) as a Hydra app on ``conf/config.yaml``.

``-m`` multirun, ``--cfg job``, ``--help`` work as in any Hydra app. Through the launch path
(rlpost/app.py) every job of the command line is composed and built once (``build_run``) before
Hydra starts; then, before the first job:
- a search sweep (``hydra/sweeper=search``) checks that every job can return ``eval.objective``;
- ``resume=`` points ``hydra.run.dir`` at the run to continue, and a multirun's ``resume=auto`` points
  ``hydra.sweep.dir`` at the sweep to finish (rlpost/runs/checkpoints.py, rlpost/launch/sweep_resume.py); the
  output folder must be writable;
- ``hardware.num_processes > 1`` re-runs the command under ``accelerate launch`` (rlpost/launch/).
Each job then trains the BuiltRun validated for it (``train(cfg, run_dir, overrides, run=...)``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rlpost.app import App, Job, build_run_of, launch
from rlpost.core.errors import RunStopped


def prelaunch(jobs: list[Job], overrides: list[str], multirun: bool) -> list[str] | int:
    """Before Hydra starts: the extra overrides of this launch, or the exit code of ``accelerate launch``."""
    from rlpost.evaluation.objective import check_objective
    from rlpost.launch.accelerate import relaunch

    if multirun and any(o.split("=", 1)[0] == "hydra/sweeper" for o in overrides):  # a search sweep
        for job in jobs:
            check_objective(job.built.settings.eval)
    key, named = resumed_directory(jobs, overrides, multirun)  # reliability
    hardware = hardware_of(jobs, multirun)  # scale-out: N processes -> accelerate launch (rlpost/launch/)
    extra = [f"{key}={claim_directory(jobs, key, named)}"]  # the last check passed: one run, one directory
    if hardware is not None:
        return relaunch(hardware, [*overrides, *extra])
    return extra


def resumed_directory(jobs: list[Job], overrides: list[str], multirun: bool) -> tuple[str, str | None]:
    """``(key, directory)``: ``hydra.run.dir`` and the run ``resume=`` continues (rlpost/runs/checkpoints.py) or
    the one given on the command line, or ``hydra.sweep.dir`` and the sweep a multirun's ``resume=auto``
    continues (rlpost/launch/sweep_resume.py) or the given one; None: a fresh directory. Also checks the
    output folder is writable."""
    from rlpost.launch.sweep_resume import comparable_config, resolve_sweep_resume
    from rlpost.runs.checkpoints import resolve_resume
    from rlpost.runs.rundir import check_writable

    given = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    check_writable(given.get(key, "multirun" if multirun else "outputs"), key)
    run_dir, message = None, None
    if multirun:  # resume=auto: the earlier sweep; a search sweeper's jobs check their folders themselves
        if given.get("resume") == "auto" and "hydra/sweeper" not in given:
            run_dir, message = resolve_sweep_resume([comparable_config(job.cfg) for job in jobs], given.get(key))
    else:
        config = comparable_config(jobs[0].cfg)
        run_dir, message = resolve_resume(config.get("resume"), config, given.get(key))
    if message:
        print(f"rlpost: {message}", file=sys.stderr)
    pattern = "${" in given.get(key, "")  # e.g. outputs/${now:%Y-%m-%d}: a pattern, resolved to a fresh folder
    return key, run_dir or (None if pattern else given.get(key))


def claim_directory(jobs: list[Job], key: str, named: str | None) -> Path:
    """This launch's run (or sweep) directory, claimed so that no other run writes into it (rlpost/runs/claim.py):
    ``named`` (given, or the run ``resume=`` continues) itself, else a fresh one where Hydra's pattern points."""
    from omegaconf import OmegaConf

    from rlpost.app import compose
    from rlpost.runs.claim import claim_fresh, claim_named

    if jobs[0].built.hardware.machine_rank > 0:  # machine 0 claims the shared directory for every machine
        return Path(named or OmegaConf.select(compose(jobs[0].overrides, hydra_node=True), key))
    if named:
        return claim_named(named, key)
    pattern = OmegaConf.select(compose(jobs[0].overrides, hydra_node=True), key)  # ${now:...} resolved now
    return claim_fresh(pattern)


def hardware_of(jobs: list[Job], multirun: bool):
    """The hardware profile when this launch must re-run under accelerate launch, else None."""
    from rlpost.launch.accelerate import should_relaunch, single_process_env
    from rlpost.launch.checks import check_multirun

    if multirun:
        for job in jobs:
            check_multirun(job.built.hardware)
        return None
    hardware = jobs[0].built.hardware
    if should_relaunch(hardware):
        return hardware
    single_process_env(hardware)  # ZeRO in one process: the env a launcher would set
    return None


def run(built, cfg: Any, output_dir: str, overrides: list[str]) -> float | None:
    """One Hydra job: train the validated run, print its summary; returns the search objective."""
    from hydra.core.hydra_config import HydraConfig

    from rlpost.analysis.inert import inert_lines
    from rlpost.evaluation.objective import objective_value
    from rlpost.launch.sweep_resume import skip_finished_job
    from rlpost.train import train

    try:
        summary = skip_finished_job(cfg, HydraConfig.get()) or train(cfg, output_dir, overrides, run=built)
    except RunStopped as err:  # reliability: disk full, run directory removed, read-only checkpoints
        print(f"rlpost: stopped: {err}", file=sys.stderr)
        sys.exit(RunStopped.exit_code)
    if summary.get("preempted"):  # reliability: SIGTERM/SIGINT -> checkpoint saved, distinct exit code
        from rlpost.runs.preemption import EXIT_PREEMPTED

        print(f"rlpost: preempted by {summary['preempted']}; checkpoint {summary['checkpoint']}", file=sys.stderr)
        sys.exit(EXIT_PREEMPTED)
    before, after = summary.get("before", {}), summary.get("after", {})
    print(f"run directory: {summary['run_dir']}")
    per_set = [f"eval/{s.cfg.name}/{m}" for s in built.eval_sets for m in ("accuracy", "reward")]
    for key in ("eval/accuracy", "eval/reward", "eval/mean_length", *per_set):
        if key in after:
            print(f"  {key:<18} {before.get(key, float('nan')):.3f} -> {after[key]:.3f}")
    print(f"  {summary['steps']} steps, {summary['seconds_per_step']:.2f} s/step")
    for line in inert_lines(summary.get("inert") or []):  # components whose activity figure stayed 0 (issue 48)
        print(f"  {line}")
    return objective_value(summary, built.settings.eval.objective)  # auto resolved; a ConfigError exits with code 2


APP = App(command="train", config_name="config", build=build_run_of, run=run, prelaunch=prelaunch)


def main(args: list[str]) -> int:
    return launch(APP, args)
