"""logging.trackers=[mlflow,trackio] on a real 2-step run of the tiny model (rlpost/runs/trackers.py): what each
tracker stored, read back offline from the run directory (MLflow's tracking client on its file store, trackio's
SQLite database), equals metrics.jsonl row for row, the held-out evaluations before and after training included;
and nothing opened a network connection."""

from __future__ import annotations

import json
import math
import socket
import sqlite3

import pytest

from support.trainer import HASH_REWARD, TINY

pytest.importorskip("mlflow")
pytest.importorskip("trackio")


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connection to an address (not a local unix socket) is refused and recorded."""
    tried = []
    connect = socket.socket.connect

    def guarded(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            tried.append(address)
            raise OSError(f"test: no network ({address})")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    return tried


def test_mlflow_and_trackio_hold_every_metric_of_metrics_jsonl(tmp_path, no_network):
    from mlflow.tracking import MlflowClient

    from rlpost.app import compose
    from rlpost.train import train

    tiny = [o for o in TINY if not o.startswith("logging.trackers")]
    overrides = [*tiny, HASH_REWARD, "train.steps=2", "logging.trackers=[mlflow,trackio]", "logging.plots=false"]
    run_dir = tmp_path / "run"
    assert train(compose(overrides), run_dir)["steps"] == 2
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "grad_norm" in row]
    evals = [row for row in rows if "eval/reward" in row]
    assert [r["step"] for r in steps] == [1, 2] and [r["step"] for r in evals] == [0, 2]

    # MLflow: the local file store inside the run directory, experiment "rlpost", one finished run named rlpost
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("rlpost").experiment_id])
    assert (run.info.run_name, run.info.status) == ("rlpost", "FINISHED")

    def mlflow_history(key):
        return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]

    for key in ("loss", "reward", "grad_norm", "entropy", "learning_rate"):
        assert mlflow_history(key) == [(r["step"], pytest.approx(r[key])) for r in steps], key
    assert mlflow_history("eval/reward") == [(r["step"], pytest.approx(r["eval/reward"])) for r in evals]
    numbers = {k for row in rows for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
    assert numbers <= set(run.data.metrics), sorted(numbers - set(run.data.metrics))  # every key of metrics.jsonl

    # trackio: its SQLite database in <run>/trackio, project rlpost, run rlpost; every metrics.jsonl row at its step
    db = run_dir / "trackio" / "rlpost.db"
    assert db.is_file()
    with sqlite3.connect(db) as conn:
        stored = [(step, json.loads(metrics)) for step, metrics in
                  conn.execute("select step, metrics from metrics where run_name = 'rlpost' order by id")]  # fmt: skip
    for row in rows:  # each row arrives whole, at its step (TRL's profiling timings come as rows of their own)
        logged = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        match = [m for step, m in stored if step == row["step"] and set(m) == set(logged)]
        assert len(match) == 1, (row["step"], sorted(logged))
        assert all(math.isclose(match[0][k], v, rel_tol=1e-6) for k, v in logged.items())
    assert no_network == []
