"""Shared by the config tests: the clean-failure assertion, the launcher tripwire, data configs from YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlpost.core.schema import build_config
from rlpost.data.sources import DataConfig

from support.paths import REPO

DATA_CONF = REPO / "conf" / "data"


def assert_clean_failure(code: int, err: str, expected: list[str], cwd) -> None:
    assert code == 2, err
    assert err.startswith("rlpost: error: "), err
    assert len(err.strip().splitlines()) == 1, f"not one message:\n{err}"
    for part in expected:
        assert part in err, f"{part!r} missing from: {err}"
    assert "Traceback" not in err and "Config search path" not in err
    assert "Loading weights" not in err  # nothing was loaded
    assert not (cwd / "outputs").exists() and not (cwd / "multirun").exists()  # no run directory


@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    """Run in tmp_path with Hydra's launcher replaced by a tripwire (bad input must never reach it)."""
    import hydra

    def tripwire(*args, **kwargs):
        raise AssertionError("validation passed: Hydra was asked to launch the job")

    monkeypatch.setattr(hydra, "main", tripwire)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def from_yaml(name: str, **overrides) -> DataConfig:
    node = yaml.safe_load((DATA_CONF / f"{name}.yaml").read_text())
    node = {**node, "seed": 0, **overrides}  # the YAML's seed is ${seed}, the run seed
    return build_config(DataConfig, node, "data")


def stand_in_replay(folder: Path) -> None:
    """A replay folder as ``logging.replay`` writes it (meta.json + parquet with a column per reward);
    build_run reads only the meta and the parquet schema."""
    import json

    import pandas as pd

    from rlpost.rewards.base import REWARDS
    from rlpost.runs.replay import COLUMNS, TERM_PREFIX

    folder.mkdir()
    meta = {"num_generations": 4, "temperature": 1.0, "tokenizer_sha256": "-", "term_names": REWARDS.names()}
    (folder / "meta.json").write_text(json.dumps(meta))
    row = {c: [0] for c in COLUMNS} | {TERM_PREFIX + name: [0.0] for name in REWARDS.names()}
    pd.DataFrame(row).to_parquet(folder / "step-000000-rank0.parquet")
