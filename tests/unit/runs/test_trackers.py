"""logging.trackers without training (rlpost/runs/trackers.py, rlpost/core/config.py): the list and the deprecated
keys folded into it, the training arguments, the checks before any model loads, each run's own folders, and
what ``rlpost show`` says. tests/trainer/test_trackers_trainer.py reads back a real run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.config import LoggingSettings
from rlpost.core.errors import ConfigError
from rlpost.runs import trackers

TINY = ["model=tiny-random"]


@pytest.mark.parametrize(
    ("settings", "active"),
    [
        ({}, ["tensorboard"]),
        ({"trackers": ["mlflow", "trackio", "mlflow"]}, ["mlflow", "trackio"]),
        ({"trackers": []}, []),
        ({"tensorboard": False}, []),  # the deprecated keys still work
        ({"tensorboard": True, "trackers": ["mlflow"]}, ["mlflow", "tensorboard"]),
        ({"wandb": "offline"}, ["tensorboard", "wandb"]),
        ({"wandb": "disabled", "trackers": ["wandb", "trackio"]}, ["trackio"]),
    ],
)
def test_trackers_and_the_deprecated_keys(settings, active):
    assert LoggingSettings(**settings).active_trackers() == active


def test_deprecated_keys_say_what_to_write_instead(capsys, monkeypatch):
    monkeypatch.setattr(trackers, "_told", set())  # each line is printed once per process
    logging = LoggingSettings(tensorboard=False, wandb="online", wandb_project="p")
    assert logging.wandb_run_mode == "online" and logging.project_name == "p"
    assert logging.deprecations() == [
        "logging.tensorboard=false logging.wandb=online is deprecated: write logging.trackers=[wandb] "
        "logging.wandb_mode=online",
        "logging.wandb_project is deprecated: write logging.project=p",
    ]
    build_run(compose([*TINY, "logging.tensorboard=false"]))
    assert "logging.tensorboard=false is deprecated: write logging.trackers=[]" in capsys.readouterr().err
    assert LoggingSettings().deprecations() == []


def test_the_training_arguments_name_each_tracker_and_keep_trackio_local(tmp_path):
    run = build_run(compose([*TINY, "logging.trackers=[tensorboard,mlflow,trackio]", "logging.project=exp"]))
    kwargs = run.grpo_config_kwargs(str(tmp_path))
    assert kwargs["report_to"] == ["tensorboard", "mlflow", "trackio"]
    assert (kwargs["project"], kwargs["trackio_space_id"], kwargs["trackio_static_space_id"]) == ("exp", None, False)
    assert build_run(compose([*TINY, "logging.trackers=[]"])).grpo_config_kwargs(str(tmp_path))["report_to"] == "none"


def test_a_missing_package_names_its_extra(monkeypatch):
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None if name == "mlflow" else real(name))
    with pytest.raises(ConfigError, match=r"logging.trackers has mlflow, which needs the mlflow-skinny package: "
                       r"pip install 'rlpost\[mlflow\]'"):  # fmt: skip
        trackers.check_trackers(LoggingSettings(trackers=["mlflow"]))


def test_settings_without_their_tracker_are_refused(monkeypatch):
    with pytest.raises(ConfigError, match="logging.mlflow_uri='file:/x' is set but mlflow is not in logging.trackers"):
        trackers.check_trackers(LoggingSettings(mlflow_uri="file:/x"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="logging.wandb_mode=online needs WANDB_API_KEY"):
        trackers.check_trackers(LoggingSettings(trackers=["wandb"], wandb_mode="online"))


def test_each_run_gets_its_own_folders(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    trackio_utils = pytest.importorskip("trackio.utils")
    import trackio.sqlite_storage

    monkeypatch.setattr(os, "environ", dict(os.environ))  # configure sets variables; the test leaves none behind
    for name, module in list(sys.modules.items()):  # nor trackio's paths
        if name.split(".")[0] == "trackio":
            for attr in ("TRACKIO_DIR", "MEDIA_DIR", "ARTIFACTS_DIR"):
                if isinstance(getattr(module, attr, None), Path):
                    monkeypatch.setattr(module, attr, getattr(module, attr))
    import mlflow

    before = mlflow.get_tracking_uri()
    try:
        for job in ("0", "1"):  # two jobs of a sweep in one process
            logging = LoggingSettings(trackers=["mlflow", "trackio"], project="exp")
            trackers.configure(logging, tmp_path / job)
            assert mlflow.get_tracking_uri() == (tmp_path / job / "mlruns").resolve().as_uri()
            assert (
                trackio.sqlite_storage.SQLiteStorage.get_project_db_path("exp") == tmp_path / job / "trackio" / "exp.db"
            )
            assert trackio_utils.MEDIA_DIR == tmp_path / job / "trackio" / "media"
            assert os.environ["MLFLOW_EXPERIMENT_NAME"] == "exp"
    finally:
        mlflow.set_tracking_uri(before)
    assert trackers.mlflow_uri(LoggingSettings(mlflow_uri="sqlite:///x.db"), tmp_path) == "sqlite:///x.db"
    assert trackers.mlflow_uri(LoggingSettings(mlflow_uri="store"), tmp_path) == Path("store").resolve().as_uri()


def test_show_says_where_the_metrics_go():
    from rlpost.tools.explain import explain

    text = explain(build_run(compose([*TINY, "logging.trackers=[mlflow,trackio]", "logging.project=exp"])))
    logging = text.split("Logging:\n")[1].splitlines()
    assert logging[0].startswith("  metrics.jsonl  every training log and held-out evaluation")
    assert logging[1].startswith("  mlflow         file:<run>/mlruns (local file store), experiment exp")
    assert logging[2].startswith("  trackio        <run>/trackio/exp.db (local SQLite, no Space), project exp")
