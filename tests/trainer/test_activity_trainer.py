"""Activity figures in a real run (issue 48, rlpost/core/activity.py): 2 steps of the tiny model through
``rlpost.train.train``. A method that acts logs ``active/<kind>/<name>`` at every optimizer step, in [0, 1] and
finite, into metrics.jsonl; a component whose figure stays 0 for the whole run is listed in summary.json's
``inert`` with its reason; the plain GRPO path logs no figure at all."""

from __future__ import annotations

import json
import math

from rlpost.app import compose
from rlpost.train import train

from support.trainer import HASH_REWARD, TINY

SHORT = [*TINY, HASH_REWARD, "train.steps=2", "logging.plots=false", "eval.at_start=false", "eval.at_end=false"]


def _run(tmp_path, overrides):
    run_dir = tmp_path / "run"
    summary = train(compose([*SHORT, *overrides]), run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, [row for row in rows if "grad_norm" in row]


def test_plain_grpo_logs_no_figure_and_lists_nothing_inert(tmp_path):
    summary, steps = _run(tmp_path, [])
    assert len(steps) == 2
    assert [k for row in steps for k in row if k.startswith("active/")] == []
    assert summary["inert"] == []


def test_a_method_that_acts_logs_its_figure_every_step_and_an_idle_one_is_listed_inert(tmp_path):
    # scale=none (Dr. GRPO's unscaled advantage A = r - mean_g): groups with different reward spreads get
    # advantages that no single positive factor maps onto GRPO's (r - mean_g) / (std_g + eps), so a share of rows
    # differs at every step. Clip-higher (epsilon_high 0.28) changes the loss gradient only where a ratio lies in
    # (1.2, 1.28]; with one pass per batch every ratio is exactly 1, so its figure is 0 at both steps: inert.
    summary, steps = _run(tmp_path, ["algorithm.advantage.scale=none", "algorithm.loss.epsilon_high=0.28"])
    figures = {k for row in steps for k in row if k.startswith("active/")}
    assert {"active/advantage/group_norm", "active/loss/clip"} <= figures, figures
    for row in steps:
        for name in figures:
            assert math.isfinite(row[name]) and 0.0 <= row[name] <= 1.0, (name, row[name])
    assert all(row["active/advantage/group_norm"] > 0 for row in steps), [
        r["active/advantage/group_norm"] for r in steps
    ]
    assert all(row["active/loss/clip"] == 0.0 for row in steps)
    inert = {entry["figure"]: entry for entry in summary["inert"]}
    # every inert entry is a figure that was 0 at both steps, and every all-zero figure is listed
    assert set(inert) == {name for name in figures if all(row[name] == 0.0 for row in steps)}
    assert "active/loss/clip" in inert and "active/advantage/group_norm" not in inert
    for entry in inert.values():
        assert entry["steps"] == 2 and entry["component"] == entry["figure"][len("active/") :]
