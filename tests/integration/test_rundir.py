"""The run directory's writes: atomic, race-free between writers, and rank 0 only in a multi-process launch."""

from __future__ import annotations

import json
import threading

from omegaconf import OmegaConf

from rlpost.runs.claim import LOCK
from rlpost.runs.rundir import RunDirectory, write_atomic

from support.runs import finish, launch, metrics


def test_concurrent_atomic_writes_never_collide(tmp_path):
    # Two ranks used to share one temp name (.summary.json.tmp): the second rename found it gone.
    path, errors = tmp_path / "summary.json", []

    def write(i: int) -> None:
        try:
            for _ in range(50):
                write_atomic(path, json.dumps({"writer": i}))
        except OSError as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(path.read_text())["writer"] in range(4)  # one whole file, from one writer
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left behind


def test_only_rank_zero_writes_run_files(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    other = RunDirectory(tmp_path / "run")
    other.write_config({"seed": 0}, ["seed=0"])
    other.append_metrics({"step": 1, "loss": 0.5})
    other.append_event({"step": 1, "event": "rollback"})
    other.write_summary({"steps": 1})
    assert list(other.path.iterdir()) == []

    monkeypatch.setenv("RANK", "0")
    main = RunDirectory(tmp_path / "run")
    main.append_metrics({"step": 1, "loss": 0.5})
    main.write_summary({"steps": 1})
    assert main.read_metrics() == [{"step": 1, "loss": 0.5}]
    assert json.loads((main.path / "summary.json").read_text()) == {"steps": 1}


def test_two_runs_started_together_get_two_directories(tmp_path):
    # the same pattern resolves to the same folder for both (a day, so they collide whatever the timing):
    # each launch claims its own before Hydra writes (rlpost/runs/claim.py)
    pattern = "hydra.run.dir=outputs/${now:%Y-%m-%d}"
    procs = [launch(tmp_path, "train.steps=2", f"seed={seed}", pattern) for seed in (1, 2)]
    results = [finish(proc) for proc in procs]
    assert [code for code, _, _ in results] == [0, 0], results[0][2][-2000:] + results[1][2][-2000:]
    dirs = sorted(p.parent for p in (tmp_path / "outputs").glob("*/config.yaml"))
    assert [d.name[10:] for d in dirs] == ["", "-1"]  # <date> and <date>-1
    seeds = sorted(OmegaConf.load(d / "config.yaml").seed for d in dirs)
    assert seeds == [1, 2]  # each directory holds its own run's config
    for d in dirs:
        assert [row["step"] for row in metrics(d)] == [1, 2]  # and its own rows, two steps each
        assert not (d / LOCK).exists()  # released when the run ended
