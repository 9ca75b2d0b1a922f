"""The one launch path (rlpost/app.py): each job is composed once and built once, and the Hydra job
trains the run that was validated.

Counted in-process through ``rlpost.cli.main`` on the tiny random model: ``rlpost.app.compose`` (the
launch's own compositions), ``rlpost.build.build_run`` (also where rlpost/train.py imported it) and
Hydra's config loads (``ConfigLoaderImpl.load_configuration``: the launch's compositions plus Hydra's
own for ``hydra.main``). Before issue 17 one ``rlpost train`` composed 3 times itself (validate,
launch_overrides, hardware_of) plus Hydra's own, and built the run twice (validate, then train()).
"""

from __future__ import annotations

import json

import pytest

import rlpost.app
import rlpost.build
import rlpost.train
from rlpost import cli

from support.trainer import HASH_REWARD, TINY

FAST = [
    *(o for o in TINY if not o.startswith("train.steps")),
    HASH_REWARD,
    "train.steps=1",
    "eval.at_start=false",
    "eval.at_end=false",
    "logging.plots=false",
]


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Counters of compose / build_run / Hydra config loads, the runs built, and the runs trained."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen = {"compose": 0, "build_run": 0, "hydra_loads": 0, "built": [], "trained": []}
    compose, build_run, load = rlpost.app.compose, rlpost.build.build_run, ConfigLoaderImpl.load_configuration
    trainer_class = rlpost.train.trainer_class

    def counting_compose(*args, **kwargs):
        seen["compose"] += 1
        return compose(*args, **kwargs)

    def counting_build(*args, **kwargs):
        seen["build_run"] += 1
        seen["built"].append(build_run(*args, **kwargs))
        return seen["built"][-1]

    def counting_load(*args, **kwargs):
        seen["hydra_loads"] += 1
        return load(*args, **kwargs)

    def recording_trainer_class(run):
        seen["trained"].append(run)
        return trainer_class(run)

    monkeypatch.setattr(rlpost.app, "compose", counting_compose)
    monkeypatch.setattr(rlpost.build, "build_run", counting_build)
    monkeypatch.setattr(rlpost.train, "build_run", counting_build)
    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counting_load)
    monkeypatch.setattr(rlpost.train, "trainer_class", recording_trainer_class)
    return seen


def test_train_composes_once_and_builds_once(counted, tmp_path):
    assert cli.main(["train", *FAST, f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1
    assert counted["compose"] == 1 and counted["build_run"] == 1
    assert counted["hydra_loads"] - counted["compose"] <= 2  # Hydra's own composition for hydra.main
    assert len(counted["trained"]) == 1 and counted["trained"][0] is counted["built"][0]  # the validated run


def test_multirun_composes_and_builds_each_job_once(counted, tmp_path):
    sweep = tmp_path / "sweep"
    assert cli.main(["train", "-m", *FAST, "seed=0,1", f"hydra.sweep.dir={sweep}"]) == 0
    assert sorted(p.parent.name for p in sweep.glob("*/summary.json")) == ["0", "1"]
    assert counted["compose"] == 2 and counted["build_run"] == 2
    assert [run.settings.seed for run in counted["trained"]] == [0, 1]
    assert all(trained is built for trained, built in zip(counted["trained"], counted["built"]))


def test_show_composes_once_and_builds_once(counted, capsys):
    assert cli.main(["show", "algorithm=dapo"]) == 0
    assert "Algorithm " in capsys.readouterr().out
    assert counted["compose"] == 1 and counted["build_run"] == 1


def test_a_tool_composes_once(counted, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5, "loss": 1.0}) + "\n")
    out = tmp_path / "curves.png"
    assert cli.main(["plot", f"runs=[{run}]", "keys=[reward]", f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    assert out.is_file() and counted["compose"] == 1 and counted["build_run"] == 0


def test_a_job_the_launch_did_not_validate_is_built_in_the_job():
    """take_validated hands a validated job out once, and only for the config it was validated with."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"seed": 0})
    job = rlpost.app.Job(["seed=0", "hydra.run.dir=x"], cfg, "built")
    rlpost.app._VALIDATED[rlpost.app.job_key(job.overrides)] = [job]
    try:
        assert rlpost.app.take_validated(OmegaConf.create({"seed": 1}), ["seed=0"]) is None  # another config
        rlpost.app._VALIDATED[("seed=0",)] = [job]
        assert rlpost.app.take_validated(OmegaConf.create({"seed": 0}), ["seed=0"]) is job
        assert rlpost.app.take_validated(OmegaConf.create({"seed": 0}), ["seed=0"]) is None  # taken once
    finally:
        rlpost.app._VALIDATED.clear()
