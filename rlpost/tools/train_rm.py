"""``rlpost train-rm [overrides] [-m]``: a reward model from preference pairs (Bradley-Terry) or from
scalar valuations (``objective=regression``; rlpost/reward_model/train.py), a Hydra app on ``conf/train_rm.yaml``. Through the launch path
(rlpost/app.py) every job's settings are built and its pair files read once before Hydra starts, so
a bad key or a bad row exits with code 2 and nothing is written; the job trains those settings."""

from __future__ import annotations

from typing import Any

from rlpost.app import App, launch
from rlpost.reward_model.train import RMSettings, build_settings, load_pairs, train_rm


def build(cfg: Any, overrides: list[str]) -> RMSettings:
    settings = build_settings(cfg)
    load_pairs(settings)  # file:line errors before anything is written
    return settings


def run(settings: RMSettings, cfg: Any, output_dir: str, overrides: list[str]) -> float:
    """One Hydra job: train the reward model, print the held-out metrics; returns the held-out accuracy
    (regression: Spearman's rho)."""
    summary = train_rm(cfg, output_dir, overrides, settings=settings)
    before, after = summary["before"], summary["after"]
    print(f"run directory: {summary['run_dir']}")
    print(f"  reward model:   {summary['model_dir']}")
    regression = settings.objective == "regression"
    for key in ("mse", "pearson", "spearman") if regression else ("accuracy", "loss", "margin"):
        print(f"  heldout/{key:<8} {before[key]:.3f} -> {after[key]:.3f}")
    print(f"  {summary['steps']} steps, {summary['seconds_per_step']:.2f} s/step")
    return after["spearman" if regression else "accuracy"]


APP = App(command="train-rm", config_name="train_rm", build=build, run=run)


def main(args: list[str]) -> int:
    return launch(APP, args)
