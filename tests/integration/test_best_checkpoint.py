"""checkpoints/best: the rule by hand on real folders (max, min, ties, a non-eval objective, a resumed run),
and a real 2-step run that evaluates every step."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from rlpost.evaluation.best_checkpoint import RECORD, BestCheckpoint

from support.runs import TINY_CLI, run_cli


def saver(tag: str):
    def save(staging):
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "weights.txt").write_text(tag)

    return save


def test_best_rule_by_hand(tmp_path):
    best = BestCheckpoint(tmp_path, "eval/accuracy")
    # steps 2, 4, 6, 8 score 0.3, 0.5, 0.5 (a tie keeps step 4), 0.4
    kept = [
        best.consider(s, {"eval/accuracy": v}, saver(f"step {s}")) for s, v in ((2, 0.3), (4, 0.5), (6, 0.5), (8, 0.4))
    ]
    assert kept == [True, True, False, False]
    assert (tmp_path / "best" / "weights.txt").read_text() == "step 4"
    assert best.summary() == {
        "step": 4,
        "objective": "eval/accuracy",
        "value": 0.5,
        "checkpoint": str(tmp_path / "best"),
    }
    assert not best.consider(10, {"eval/reward": 0.9}, saver("x"))  # no objective logged: not a candidate
    assert not best.consider(10, {"eval/accuracy": float("nan")}, saver("x"))
    # a resumed run reads the record back: 0.45 does not beat 0.5, 0.6 does
    resumed = BestCheckpoint(tmp_path, "eval/accuracy")
    assert not resumed.consider(12, {"eval/accuracy": 0.45}, saver("step 12"))
    assert resumed.consider(14, {"eval/accuracy": 0.6}, saver("step 14"))
    assert json.loads((tmp_path / "best" / RECORD).read_text())["step"] == 14
    assert not list(tmp_path.glob(".tmp-*"))  # the staging folder was renamed into place


def test_min_mode_and_an_objective_without_held_out_values(tmp_path):
    low = BestCheckpoint(tmp_path / "a", "eval/mean_length", mode="min")
    assert [low.consider(s, {"eval/mean_length": v}, saver(str(s))) for s, v in ((1, 9.0), (2, 12.0), (3, 7.5))] == [
        True,
        False,
        True,
    ]
    assert low.summary()["step"] == 3
    train_metric = BestCheckpoint(tmp_path / "b", "reward")  # a training log key: nothing held out to follow
    assert not train_metric.consider(1, {"reward": 1.0}, saver("x")) and train_metric.summary() is None
    with pytest.raises(ValueError, match="max or min"):
        BestCheckpoint(tmp_path, "eval/accuracy", mode="up")


def test_a_run_keeps_its_best_evaluated_policy(tmp_path):
    run_dir = tmp_path / "run"
    cli = [o for o in TINY_CLI if not o.startswith("train.steps")]
    run_cli(["train", *cli, "train.steps=2", "eval.every=1", f"hydra.run.dir={run_dir}"], tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r and r["step"] > 0]
    assert [s for s, _ in evals] == [1, 2]  # every step, the last one by at_end
    step, value = max(evals, key=lambda e: (e[1], -e[0]))  # the highest, the earliest on a tie
    assert summary["best"]["step"] == step and summary["best"]["value"] == pytest.approx(value)
    best = run_dir / "checkpoints" / "best"
    assert json.loads((best / RECORD).read_text())["step"] == step
    assert load_file(best / "model.safetensors")  # a loadable policy
